#!/bin/bash
# interlink-nats job script (runtime apptainer). Self-contained; run with cwd = job directory.
# Needs bash >= 4.3 (wait -n) and coreutils (base64, chmod, mkdir, ln, rm, sleep).
# Every pod-derived value below is a single-quoted shell word; only the pre-exec sections are raw shell.
# Rendered by interlink-nats from services/scripts/templates/job.sh.j2, which explains each part (docs/pod-support.md).
set -u
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 403)); then
  printf '%s\n' "interlink-nats: this job script needs bash >= 4.3 (wait -n); this host's is $BASH_VERSION" >&2
  exit 125
fi
umask 077
__job_dir=${INTERLINK_JOB_DIR:-$PWD}
cd -- "$__job_dir" || exit 125
__job_dir=$PWD
export INTERLINK_JOB_DIR="$__job_dir"
__prepared=0
[ -d containers ] && [ -d volumes/vol ] && [ -d volumes/vol/dir ] && __prepared=1
if [ "$__prepared" = 0 ]; then
  chmod 0700 -- "$__job_dir"
  mkdir -p -- containers
fi
__names=(c)
__cancelled=0
__trapped=0
__setup_error=
__rc=0
__pgids=()
__timers=()
__wait_status=0

__changed() { printf '%s\n' "${__job_dir##*/}" 2>/dev/null >> "$__job_dir/../.changes"; }
__started() { printf '%(%s)T\n' -1 > "containers/$1.started"; __changed; }
__exited() { printf '%s\n' "$2" > "containers/$1.exit"; __changed; }
__terminate_rest() {
  local n
  for n in ${__names[@]+"${__names[@]}"}; do
    if [ ! -s "containers/$n.exit" ]; then
      printf '%s\n' "$2" >> "containers/$n.log"
      __exited "$n" "$1"
    fi
  done
}
__signal_all() {
  local g
  for g in ${__pgids[@]+"${__pgids[@]}"}; do kill "-$1" -- "-$g" 2>/dev/null; done
}
__on_signal() {
  __trapped=1
  if [ "$__cancelled" = 0 ]; then
    __cancelled=1
    __signal_all TERM
    ( sleep 30; __signal_all KILL ) &
    __timers+=($!)
  fi
}
__cleanup() {
  local t
  trap : TERM INT
  for t in ${__timers[@]+"${__timers[@]}"}; do kill -- "-$t" 2>/dev/null; done
  __terminate_rest 143 "interlink-nats: the job script ended before this container ended"
  [ "$__prepared" = 1 ] && [ -z "${INTERLINK_JOB_REMOVES_LAYOUT-}" ] || rm -rf -- "$__job_dir"/.prepared "$__job_dir"/volumes "$__job_dir"/rootfs
}
trap __on_signal TERM INT
trap __cleanup EXIT
set -m
__lost() {
  local p
  [ "$__cancelled" = 1 ] && ! kill -0 "$1" 2>/dev/null || return 1
  jobs -rp > "$__job_dir"/.jobs 2>/dev/null || return 1
  while read -r p; do [ "$p" = "$1" ] && return 0; done < "$__job_dir"/.jobs
  return 1
}
__wait() {
  local rc
  while :; do
    if [ "$__cancelled" = 1 ] && __lost "$1"; then
      __wait_status=143
      return 0
    fi
    __trapped=0
    wait "$1"
    rc=$?
    if [ "$__trapped" = 1 ] && [ "$rc" -gt 128 ]; then
      if kill -0 "$1" 2>/dev/null; then continue; fi
      if __lost "$1"; then
        __wait_status=143
        return 0
      fi
      wait "$1" 2>/dev/null
      local again=$?
      [ "$again" = 127 ] || rc=$again
    fi
    __wait_status=$rc
    return 0
  done
}
__setup_failed() { [ -n "$__setup_error" ] || __setup_error=$1; }
__t() { printf '%s' "$2" > "$1" || __setup_failed "cannot write $1"; }
__b() { printf '%s' "$2" | base64 -d > "$1" || __setup_failed "cannot write $1"; }
__need() { test "-$1" "$2" || __setup_failed "hostPath $2 is not of type $3"; }
export APPTAINER_CACHEDIR=/scratch/cache

# --- volumes ---
if [ "$__prepared" = 0 ]; then
  mkdir -p -- volumes/vol volumes/vol/dir || __setup_failed "cannot create volume directories"
  chmod 0755 -- volumes/vol volumes/vol/dir
fi
umask 0377
__t volumes/vol/dir/a.txt 'line 1
it'"'"'s line 2
'
umask 0137
__b volumes/vol/b.bin AAH+
umask 0077

# --- pre-exec (pool BuildConfig.pre_exec; trusted admin shell) ---
source /etc/profile.d/site.sh
cd -- "$__job_dir" || exit 125
umask 022

# --- containers ---
__c0() {
  if [ -e /images/busybox ]; then __img=/images/busybox; else __img=docker://busybox; fi
  exec /opt/apptainer/bin/apptainer exec --no-home --writable-tmpfs --bind /etc/grid-security --bind "$__job_dir"/volumes/vol:/mnt/vol:ro "$__img" ls -lR /mnt/vol
}
__launch() {
  __started "$2"
  "__c$1" > "containers/$2.log" 2>&1 < /dev/null &
  __pgids+=($!)
}
__record() {
  [ -s "containers/$1.exit" ] || __exited "$1" "$2"
  if [ "$2" != 0 ] && [ "$__rc" = 0 ]; then __rc=$2; fi
}
if [ -n "$__setup_error" ]; then
  __rc=125
  __terminate_rest 125 "interlink-nats: pod setup failed: $__setup_error"
fi
if [ "$__rc" = 0 ] && [ "$__cancelled" = 0 ]; then
  __main_pids=()
  __main_names=(c)
  __main_rcs=()
  __launch 0 c
  __main_pids+=($!)
  while :; do
    __found=0
    __left=0
    for __i in ${__main_pids[@]+"${!__main_pids[@]}"}; do
      if kill -0 "${__main_pids[$__i]}" 2>/dev/null; then
        __left=1
        continue
      fi
      __wait "${__main_pids[$__i]}"
      __main_rcs[$__i]=$__wait_status
      [ -s "containers/${__main_names[$__i]}.exit" ] || __exited "${__main_names[$__i]}" "$__wait_status"
      unset "__main_pids[$__i]"
      __found=1
    done
    [ "$__found" = 0 ] || continue
    [ "$__left" = 1 ] || break
    wait -n 2>/dev/null
  done
  for __i in "${!__main_names[@]}"; do __record "${__main_names[$__i]}" "${__main_rcs[$__i]}"; done
fi
if [ "$__cancelled" = 1 ]; then
  __terminate_rest 143 "interlink-nats: cancelled before this container started"
  [ "$__rc" != 0 ] || __rc=143
fi
exit "$__rc"
