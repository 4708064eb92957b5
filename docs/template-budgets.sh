#!/usr/bin/env bash
# measure.sh BIN ITER PORT: serve's peak RSS and CPU while one tenant posts
# the memory attack (ITER doublings) and the loop attack, and another
# tenant's preview latency meanwhile.
set -u
BIN=$1 ITER=$2 PORT=$3
D=$(mktemp -d); cd "$D"
TOKA=$($BIN token create --db "$D/er.db" --tenant acme | tail -1)
TOKB=$($BIN token create --db "$D/er.db" --tenant bravo | tail -1)
$BIN serve --db "$D/er.db" --listen 127.0.0.1:$PORT >serve.out 2>serve.err &
PID=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$PORT/healthz && break; sleep 0.1; done
U="http://127.0.0.1:$PORT"
cpu() { awk '{printf "%.2f", ($14+$15)/100}' /proc/$PID/stat; }
rss() { grep -E "^$1" /proc/$PID/status | awk '{printf "%d MB", $2/1024}'; }
put() { curl -s -o "$D/last.json" -w '%{http_code} %{time_total}s' -m "$3" -X PUT -H "Authorization: Bearer $1" "$U/v1/templates/$2" -d @-; }
preview() { curl -s -o "$D/last.json" -w '%{http_code} %{time_total}s' -m "$3" -X POST -H "Authorization: Bearer $1" "$U/v1/templates/$2/render" -d '{"recipient": {"id": "ada", "email": "ada@example.com"}, "data": {}}'; }
echo "binary $BIN, memory attack with $ITER doublings"
echo "idle: RSS $(rss VmRSS), peak $(rss VmHWM), CPU $(cpu) s"
printf '{"parts": {"subject": "s", "text": "ok {{.data}}"}}' | put "$TOKB" normal/email/en 5 >/dev/null
MEM='{{$s := \"x\"}}{{range '$ITER'}}{{$s = printf \"%s%s\" $s $s}}{{end}}{{len $s}}'
LOOP='{{range 100000}}{{range 100000}}{{end}}{{end}}'
c0=$(cpu)
echo "memory attack, text part, PUT: $(printf '{"parts": {"subject": "s", "text": "%s"}}' "$MEM" | put "$TOKA" mem/email/en 120)"
echo "memory attack, preview: $(preview "$TOKA" mem/email 120) $(head -c 300 "$D/last.json")"
echo "memory attack, html part, PUT (save-time check): $(printf '{"parts": {"subject": "s", "html": "%s"}}' "$MEM" | put "$TOKA" memh/email/en 120) $(head -c 300 "$D/last.json")"
echo "after the memory attack: RSS $(rss VmRSS), peak $(rss VmHWM), CPU used $(awk -v a=$(cpu) -v b=$c0 'BEGIN{printf "%.2f", a-b}') s"
c0=$(cpu)
echo "loop attack, html part, PUT (client gives up after 5 s): $(printf '{"parts": {"subject": "s", "html": "%s"}}' "$LOOP" | put "$TOKA" looph/email/en 5) $(head -c 300 "$D/last.json")"
printf '{"parts": {"subject": "s", "text": "%s"}}' "$LOOP" | put "$TOKA" loop/email/en 5 >/dev/null
# Two abandoned previews (one per core), then another tenant's previews.
(preview "$TOKA" loop/email 5 >/dev/null &); (preview "$TOKA" loop/email 5 >/dev/null &)
sleep 0.5
for i in 1 2 3; do echo "bravo's preview during the attack: $(preview "$TOKB" normal/email 10)"; done
sleep 10
echo "loop attack: CPU used in the $((5+10)) s after the first request $(awk -v a=$(cpu) -v b=$c0 'BEGIN{printf "%.2f", a-b}') s; RSS $(rss VmRSS), peak $(rss VmHWM)"
kill $PID; wait $PID 2>/dev/null
rm -rf "$D"
