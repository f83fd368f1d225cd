#!/usr/bin/env bash
# scripts/pyavro.sh: the Python environment of tools/avro_produce.py, the
# tests' Avro and Protobuf producer: Confluent's own Python client
# (confluent-kafka, whose wheel bundles its librdkafka) with its Schema
# Registry serializers (confluent_kafka.schema_registry.avro.AvroSerializer,
# which encodes with fastavro, and .protobuf.ProtobufSerializer, with
# Google's protobuf; both talk to the registry with httpx; authlib, attrs
# and cachetools come with the "schemaregistry" extra).  The Protobuf
# message classes are made from descriptor sets that Debian's protoc
# (protobuf-compiler) writes.  A venv built once per
# machine from PyPI; prints its directory.
#
#   venv=$(bash scripts/pyavro.sh)
#   "$venv/bin/python" tools/avro_produce.py spec.json
#
#   SDP_PYAVRO=DIR   where the venv is (default /var/cache/sdp_ext/pyavro)
#
# Built as root (or with write access to DIR); used by any user (the tests run
# as postgres).  Built again when the pinned versions below change.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

venv=${SDP_PYAVRO:-/var/cache/sdp_ext/pyavro}
# the versions tested; pip resolves their own dependencies
requirements='confluent-kafka[avro,protobuf,schemaregistry]==2.16.1 fastavro==1.13.1 protobuf==7.36.2'

if [ "$(cat "$venv/.sdp-built" 2>/dev/null)" = "$requirements" ]; then
  echo "$venv"
  exit 0
fi

# Debian's python3 (not another one first in PATH): python3-venv gives it
# ensurepip, which a venv needs for its own pip.
sdp_install_packages python3-venv protobuf-compiler libprotobuf-dev
sdp_log "building the Avro producer's Python environment in $venv (once per machine)"
# the stamp is written last: a build that failed is made again next time
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
# shellcheck disable=SC2086  # the list is split on purpose
"$venv/bin/pip" install -q --disable-pip-version-check $requirements >&2 ||
  { sdp_log "pip could not install $requirements"; exit 1; }
"$venv/bin/python" -c 'from confluent_kafka.schema_registry.avro import AvroSerializer' ||
  { sdp_log "the venv cannot import AvroSerializer"; exit 1; }
"$venv/bin/python" -c 'from confluent_kafka.schema_registry.protobuf import ProtobufSerializer' ||
  { sdp_log "the venv cannot import ProtobufSerializer"; exit 1; }
"$venv/bin/pip" freeze --disable-pip-version-check > "$venv/sdp-freeze.txt"
chmod -R a+rX "$venv"
echo "$requirements" > "$venv/.sdp-built"
echo "$venv"
