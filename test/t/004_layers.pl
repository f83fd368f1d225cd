# 004_layers.pl
#	The layers of src/ (sdp.h's module map): which folder may call into or
#	include which.  From the built objects' symbols (nm) and the sources'
#	#include lines:
#	  - no circle of files: the calls between the objects, and the includes
#	    between the sources, form no cycle (a file that calls another never
#	    is called back by it, through any chain);
#	  - every call and include goes down the layers, never up:
#	      main.c > launcher/, sql/ > worker/ > prepare/ > kafka/
#	      > stateful/, exec/ > decl/ > shmem/ > guc.c, sdp.h and compat.h
#	    so a batch's path enters worker/ and exec/ and comes back only
#	    through the documented callback interfaces (isolate.h's stages and
#	    the operator vtable, which are calls through pointers nm does not
#	    see).
#	  - a header per module: what a header X.h declares (functions and
#	    variables) is defined in X.o, the module of the same name, but for
#	    the worker's entry point, which worker/worker_args.h (all the
#	    launcher sees of a worker) declares for worker/worker.c;
#	It reads the tree it runs in, after the build: it fails if it finds no
#	objects to read, rather than pass on nothing.

use v5.36;

use File::Basename qw(dirname basename);
use File::Find ();
use Test::More;

my %rank = (
	'main' => 10,
	'launcher' => 9,
	'sql' => 9,
	'worker' => 8,
	'prepare' => 7,
	'kafka' => 6,
	'stateful' => 5,
	'stateful/operators' => 5,
	'exec' => 5,
	'decl' => 3,
	'shmem' => 2,
	'guc' => 1,
	'sdp.h' => 0,
	'compat.h' => 0,
);
# folders that are one module (the registry names the operators, which use the framework)
my %module = ('stateful/operators' => 'stateful', 'guc' => 'base', 'sdp.h' => 'base', 'compat.h' => 'base');

# the layer of a file under src/: its folder, or for the top level its own name
sub layer ($path)
{
	(my $rel = $path) =~ s{^src/}{};
	my $dir = dirname($rel);
	return $dir ne '.' ? $dir : ($rel =~ /^(main|guc)\.[coh]$/ ? $1 : $rel);
}

sub module ($layer) { $module{$layer} // $layer }

my (@objects, @sources);
File::Find::find(
	{
		no_chdir => 1,
		wanted => sub {
			push @objects, $_ if /\.o\z/;
			push @sources, $_ if /\.[ch]\z/;
		}
	},
	'src');
@objects = sort @objects;
@sources = sort @sources;
cmp_ok(scalar @objects, '>=', 40, 'the built objects of src/ are there to read (' . scalar(@objects) . ')');
cmp_ok(scalar @sources, '>=', 70, 'the sources of src/ are there to read (' . scalar(@sources) . ')');

# every file has a layer
my @unknown = grep { !exists $rank{ layer($_) } } @objects, @sources;
is(join(', ', @unknown), '', 'every file of src/ is in a known layer');

# Tarjan's strongly connected components of a graph (name -> [names]):
# the components of more than one file, each as "a b c"
sub cycles (%g)
{
	my ($index, @stack, %on, %idx, %low, @out) = (0);
	my $visit;
	$visit = sub ($v) {
		$idx{$v} = $low{$v} = $index++;
		push @stack, $v;
		$on{$v} = 1;
		for my $w (sort keys %{ $g{$v} // {} })
		{
			if (!exists $idx{$w})
			{
				$visit->($w);
				$low{$v} = $low{$w} if $low{$w} < $low{$v};
			}
			elsif ($on{$w})
			{
				$low{$v} = $idx{$w} if $idx{$w} < $low{$v};
			}
		}
		if ($low{$v} == $idx{$v})
		{
			my @c;
			while (1)
			{
				my $w = pop @stack;
				delete $on{$w};
				push @c, $w;
				last if $w eq $v;
			}
			push @out, join(' ', sort @c) if @c > 1;
		}
	};
	$visit->($_) for grep { !exists $idx{$_} } sort keys %g;
	return @out;
}

# the edges that go up or sideways between layers, as "from -> to (why)"
sub upward (%edges)
{
	my @bad;
	for my $e (sort keys %edges)
	{
		my ($from, $to) = split / /, $e;
		my ($lf, $lt) = (layer($from), layer($to));
		next if module($lf) eq module($lt);
		push @bad, "$from -> $to ($edges{$e})" if $rank{$lf} <= $rank{$lt};
	}
	return @bad;
}

# calls: the symbols each object defines and uses
my (%defined_in, %uses);
for my $o (@objects)
{
	open(my $nm, '-|', 'nm', $o) or die "nm $o: $!";
	while (<$nm>)
	{
		if (/^[0-9a-f]+ [TDBR] (\S+)$/) { $defined_in{$1} = $o }
		elsif (/^\s+U (\S+)$/) { push @{ $uses{$o} }, $1 }
	}
	close($nm) or die "nm $o failed";
}
my (%calls, %call_why);
for my $o (@objects)
{
	for my $s (@{ $uses{$o} // [] })
	{
		my $d = $defined_in{$s} // next;
		next if $d eq $o;
		$calls{$o}{$d} = 1;
		$call_why{"$o $d"} //= $s;
	}
}
cmp_ok(scalar(keys %call_why), '>=', 100, 'calls between the objects were found (' . scalar(keys %call_why) . ')');
is(join('; ', cycles(%calls)), '', 'no circle of files in the calls between the objects');
is(join("\n", upward(%call_why)), '', 'every call goes down the layers');

# includes
my (%includes, %include_why);
for my $f (@sources)
{
	open(my $fh, '<', $f) or die "$f: $!";
	while (<$fh>)
	{
		next unless /^#include "([^"]+)"/;
		my $t = "src/$1";
		next unless -f $t;
		$includes{$f}{$t} = 1;
		$include_why{"$f $t"} = 'include';
	}
	close($fh);
}
cmp_ok(scalar(keys %include_why), '>=', 150, 'includes between the sources were found (' . scalar(keys %include_why) . ')');
is(join('; ', cycles(%includes)), '', 'no circle of files in the includes');
is(join("\n", upward(%include_why)), '', 'every include goes down the layers');

# a header per module: each extern of X.h is defined in X.o (one built
# only with a measurement flag is defined nowhere, and not counted)
my %header_exception = ('sdp_flow_worker_main' => 'src/worker/worker_args.h');
my (@stray, $nexterns);
for my $h (grep { /\.h\z/ } @sources)
{
	open(my $fh, '<', $h) or die "$h: $!";
	local $/;
	my $text = <$fh>;
	close($fh);
	$text =~ s{/\*.*?\*/}{}gs;
	(my $stem = $h) =~ s/\.h\z//;
	while ($text =~ /^extern\s+(?:PGDLLEXPORT\s+)?[\w\s\*]+?\b(\w+)\s*(?:\(|\[[^\]]*\]\s*;|;)/mg)
	{
		my $name = $1;
		my $where = $defined_in{$name} // next;
		$nexterns++;
		next if ($header_exception{$name} // '') eq $h;
		(my $module = $where) =~ s/\.o\z//;
		push @stray, "$h declares $name of $where" if $module ne $stem;
	}
}
cmp_ok($nexterns // 0, '>=', 200, "the headers' declarations were found ($nexterns)");
is(join("\n", @stray), '', 'each header declares only its own module\'s functions and variables');

# the two halves of the batch path: exec/ never reaches back into worker/
my @back = grep { layer((split / /)[0]) eq 'exec' && layer((split / /)[1]) eq 'worker' } keys %call_why;
is(join(', ', @back), '', 'nothing in exec/ calls into worker/');

done_testing();
