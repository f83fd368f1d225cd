/*
 * airports.h
 *      Reference data for tools/flight_sim.c: real airports (ICAO code, name,
 *      position) and airline callsign prefixes.
 *
 * The airports concentrate on Europe and North America, with several fields
 * around London, Paris, Amsterdam, Frankfurt, New York and Chicago so that
 * the terminal areas there get busy: the zone congestion flow needs crowded
 * geofences to be interesting.  Positions are the aerodrome reference points
 * rounded to four decimals, which is plenty for a simulator.
 */
#ifndef SDP_TOOLS_AIRPORTS_H
#define SDP_TOOLS_AIRPORTS_H

typedef struct Airport
{
	const char *icao;			/* ICAO location indicator */
	const char *name;
	double		lat;			/* degrees north */
	double		lon;			/* degrees east */
} Airport;

static const Airport airports[] = {
	/* London */
	{"EGLL", "London Heathrow", 51.4706, -0.4619},
	{"EGKK", "London Gatwick", 51.1481, -0.1903},
	{"EGSS", "London Stansted", 51.8850, 0.2350},
	{"EGGW", "London Luton", 51.8747, -0.3683},
	{"EGLC", "London City", 51.5053, 0.0553},
	/* Paris */
	{"LFPG", "Paris Charles de Gaulle", 49.0097, 2.5479},
	{"LFPO", "Paris Orly", 48.7233, 2.3794},
	{"LFPB", "Paris Le Bourget", 48.9694, 2.4414},
	/* Amsterdam and the Low Countries */
	{"EHAM", "Amsterdam Schiphol", 52.3086, 4.7639},
	{"EHRD", "Rotterdam The Hague", 51.9569, 4.4372},
	{"EHEH", "Eindhoven", 51.4501, 5.3745},
	{"EBBR", "Brussels", 50.9014, 4.4844},
	/* Frankfurt and Germany */
	{"EDDF", "Frankfurt am Main", 50.0333, 8.5706},
	{"EDFH", "Frankfurt-Hahn", 49.9487, 7.2639},
	{"EDDK", "Cologne Bonn", 50.8659, 7.1427},
	{"EDDM", "Munich", 48.3538, 11.7861},
	/* rest of Europe */
	{"LSZH", "Zurich", 47.4647, 8.5492},
	{"LEMD", "Madrid Barajas", 40.4719, -3.5626},
	{"LIRF", "Rome Fiumicino", 41.8003, 12.2389},
	{"EIDW", "Dublin", 53.4213, -6.2701},
	{"EKCH", "Copenhagen Kastrup", 55.6181, 12.6561},
	{"LOWW", "Vienna Schwechat", 48.1103, 16.5697},
	{"ESSA", "Stockholm Arlanda", 59.6519, 17.9186},
	/* New York */
	{"KJFK", "New York John F. Kennedy", 40.6398, -73.7789},
	{"KLGA", "New York LaGuardia", 40.7772, -73.8726},
	{"KEWR", "Newark Liberty", 40.6925, -74.1687},
	{"KTEB", "Teterboro", 40.8501, -74.0608},
	{"KISP", "Long Island MacArthur", 40.7952, -73.1002},
	/* Chicago */
	{"KORD", "Chicago O'Hare", 41.9786, -87.9048},
	{"KMDW", "Chicago Midway", 41.7868, -87.7522},
	{"KRFD", "Chicago Rockford", 42.1954, -89.0972},
	/* rest of North America */
	{"KBOS", "Boston Logan", 42.3643, -71.0052},
	{"KIAD", "Washington Dulles", 38.9445, -77.4558},
	{"KATL", "Atlanta Hartsfield-Jackson", 33.6367, -84.4281},
	{"KMIA", "Miami", 25.7932, -80.2906},
	{"KDFW", "Dallas/Fort Worth", 32.8968, -97.0380},
	{"KDEN", "Denver", 39.8617, -104.6731},
	{"KLAX", "Los Angeles", 33.9425, -118.4081},
	{"KSFO", "San Francisco", 37.6189, -122.3750},
	{"KSEA", "Seattle-Tacoma", 47.4490, -122.3093},
	{"CYYZ", "Toronto Pearson", 43.6772, -79.6306},
	{"CYUL", "Montreal Trudeau", 45.4706, -73.7408},
};

#define N_AIRPORTS ((int) (sizeof(airports) / sizeof(airports[0])))

/* ICAO airline designators used as callsign prefixes ("BAW123"). */
static const char *const airline_prefixes[] = {
	"BAW", "VIR", "EZY", "RYR", "AFR", "KLM", "DLH", "SWR", "IBE", "ITY",
	"SAS", "AUA", "EIN", "BEL", "UAL", "AAL", "DAL", "JBU", "SWA", "ACA",
	"WJA", "ASA",
};

#define N_AIRLINE_PREFIXES \
	((int) (sizeof(airline_prefixes) / sizeof(airline_prefixes[0])))

#endif							/* SDP_TOOLS_AIRPORTS_H */
