# Shared by scripts/kafka.sh and scripts/s3.sh: a server started in the background, known by the
# pid in $pidfile and listening on 127.0.0.1:$port. The sourcing script defines `say`, `pidfile`
# and `port` first.

running_pid() {
  [[ -f $pidfile ]] || return 1
  local pid
  pid=$(<"$pidfile")
  kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# SIGTERM, then SIGKILL if the server has not exited within 30 s.
stop() {
  local pid
  if ! pid=$(running_pid); then
    say "not running"
    rm -f "$pidfile"
    return 0
  fi
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      say "no clean stop within 30 s; killing pid $pid"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.3
  done
  rm -f "$pidfile"
  say "stopped"
}

status() {
  local pid
  if pid=$(running_pid); then
    say "running (pid $pid) on 127.0.0.1:$port"
  else
    say "not running"
    return 1
  fi
}
