#!/bin/bash
# Past capacity, the way an operator runs it: the binary's sim at latency 0,
# serve with its defaults on a fresh file routed to it, and bench load in a
# third process offering RATE new events a second over 512 connections for
# FOR; then the file's statuses. Shows whether and when ingest is shed
# (docs/PROOF.md, "Past capacity: shedding on the lag").
#
#   bench/past-capacity.sh ./edgerelay TAG 6000 45s
set -euo pipefail
BIN=$1 TAG=$2 RATE=$3 FOR=$4
D=$(mktemp -d "/tmp/past-$TAG-XXXX")
"$BIN" sim --listen 127.0.0.1:0 --quiet 2> "$D/sim.log" &
SIM=$!
U=
for _ in $(seq 100); do
  U=$(grep -o 'listening on http://[^ ]*' "$D/sim.log" | head -1 | cut -d' ' -f3) || true
  [ -n "$U" ] && break
  sleep 0.1
done
PORT=$((20000 + RANDOM % 20000))
"$BIN" serve --db "$D/s.db" --listen "127.0.0.1:$PORT" --route "email=email-http+$U?from=relay@example.com&idempotency=honoured" > "$D/serve.log" 2>&1 &
SRV=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.1; done
"$BIN" bench load --url "http://127.0.0.1:$PORT" --conns 512 --rate "$RATE" --for "$FOR" --prefix "$TAG-"
sqlite3 -readonly "$D/s.db" "SELECT status, count(*) FROM notifications GROUP BY 1"
kill "$SRV" "$SIM"
wait
