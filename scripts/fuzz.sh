#!/usr/bin/env bash
# Builds the libFuzzer targets of cpp/fuzz (clang, ASan + UBSan, the engine instrumented too) in
# build/fuzz, makes their seed corpora and runs each target for a fixed time. Exits non-zero on
# any finding (crash, sanitizer report, leak, out-of-memory, timeout, an exception that is not a
# zarr_device::Error, a broken invariant) and prints executions and coverage per target.
#
#   scripts/fuzz.sh                          # every target, 40 s each, one after the other
#   scripts/fuzz.sh --seconds 600 --jobs 2   # longer, by hand; two targets at a time
#   scripts/fuzz.sh --targets "fuzz_metadata fuzz_decoders"
#   scripts/fuzz.sh --stop-on-first          # a target stops at its first finding
#   scripts/fuzz.sh --fork                   # libFuzzer's fork mode (see below)
#   scripts/fuzz.sh --no-build               # reuse the built targets
#   scripts/fuzz.sh --ignore 'crc32c: decode(at most'   # known findings ('|'-separated message
#                                            # parts of the harness's own checks) do not stop it
#
# A finding does not end a target's run: libFuzzer is started again on the corpus until the time
# is up (with --fork, libFuzzer's fork mode does the same inside one run: slower to start, better
# when a shallow finding keeps coming back). Seeds that are findings themselves are reported, then
# set aside in build/fuzz/quarantine/ so that they do not stop the fuzzing. Every reproducer is
# saved in build/fuzz/findings/<target>/ and the summary groups them by signature. Corpora (kept
# between runs) are in build/fuzz/corpus/<target>/, seeds in build/fuzz/seeds/<target>/ (made
# anew by each run), logs in build/fuzz/logs/. To replay a reproducer with the engine's error
# messages printed, and to minimise it:
#   ZARR_DEVICE_FUZZ_VERBOSE=1 build/fuzz/<target> build/fuzz/findings/<target>/<file>
#   build/fuzz/<target> -minimize_crash=1 -runs=20000 <file>
#
# Installs what is missing on Debian/Ubuntu (clang and its libFuzzer runtime, the build
# dependencies) with apt-get, through sudo when not root.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ZARR_DEVICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/zarr-device/venv}"
build="$repo/build/fuzz"
seconds=40
jobs=1
build_first=1
mode=restart  # restart | fork | stop
all_targets=(fuzz_metadata fuzz_decoders fuzz_shard_index fuzz_codec_chain)
targets=("${all_targets[@]}")

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --targets) read -r -a targets <<<"$2"; shift 2 ;;
    --targets=*) read -r -a targets <<<"${1#*=}"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --stop-on-first) mode=stop; shift ;;
    --fork) mode=fork; shift ;;
    --no-build) build_first=0; shift ;;
    --ignore) export ZARR_DEVICE_FUZZ_IGNORE="$2"; shift 2 ;;
    --ignore=*) export ZARR_DEVICE_FUZZ_IGNORE="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$seconds$jobs" in ''|*[!0-9]*) echo "fuzz.sh: --seconds and --jobs take numbers" >&2; exit 2 ;; esac
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in *" $t "*) ;; *) echo "fuzz.sh: no target '$t'" >&2; exit 2 ;; esac
done

# Per target: the longest input, and the largest single allocation that is not a finding. The
# decoding targets' chunks are at most a few KiB, so an allocation over 256 MiB is a decompression
# bomb (the RSS limit alone would let a few hundred MiB of intermediate buffer pass unnoticed); a
# codec decoding alone, with no size known, may allocate up to its own expansion bound.
max_len_of() {
  case "$1" in
    fuzz_metadata|fuzz_decoders) echo 8192 ;;
    *) echo 32768 ;;
  esac
}
malloc_limit_of() {
  case "$1" in
    fuzz_codec_chain|fuzz_shard_index) echo 256 ;;
    *) echo 2048 ;;
  esac
}
# An input that runs past the timeout is a finding (a hang). libFuzzer also saves an input that
# ran for -report_slow_units seconds as slow-unit-*; such a unit is judged by its replay alone
# (slow_unit_verdict), since on a loaded 2-core machine a stall of the host alone can make one.
timeout_s=10
libfuzzer_flags() {
  echo "-timeout=$timeout_s -report_slow_units=$timeout_s -rss_limit_mb=2048" \
       "-malloc_limit_mb=$(malloc_limit_of "$1") -max_len=$(max_len_of "$1")"
}

step() { printf '\n==> %s\n' "$*"; }
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
apt_install() {
  echo "fuzz.sh: installing system packages: $*"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "$@"
}

# --- tools ------------------------------------------------------------------------------------
if [ "$build_first" = 1 ]; then
  step "tools"
  apt_packages=(cmake ninja-build pkg-config libzstd-dev liblz4-dev zlib1g-dev libblosc-dev
                nlohmann-json3-dev python3 python3-venv)
  command -v clang++ >/dev/null 2>&1 || apt_packages+=(clang)
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

  # libFuzzer's runtime (libclang_rt.fuzzer-<arch>.a) comes with libclang-rt-<N>-dev on Debian 12
  # (in libclang-common-<N>-dev before LLVM 14).
  probe="$(mktemp -d)"
  trap 'rm -rf "$probe"' EXIT
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$probe/probe.cpp"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>/dev/null; then
    major="$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)"
    apt_install "libclang-rt-$major-dev" || apt_install "libclang-common-$major-dev"
    clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" || {
      echo "fuzz.sh: clang++ cannot link -fsanitize=fuzzer (no libFuzzer runtime)" >&2; exit 1; }
  fi
fi

# A cmake new enough for CMakeLists.txt (Debian 12's may be older): the project's virtual
# environment has one (scripts/setup.sh); failing that, a small one of our own in build/fuzz/tools,
# which also gets the Python packages the seeds are made with.
required_cmake="$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\)).*/\1/p' "$repo/CMakeLists.txt")"
version_ok() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
cmake_version() { "$1" --version 2>/dev/null | sed -n 's/^cmake version \([0-9.]*\).*/\1/p'; }
tools="$build/tools"
python="python3"
[ -x "$venv/bin/python" ] && python="$venv/bin/python"
cmake_bin=""
for candidate in "$venv/bin/cmake" "$tools/bin/cmake" "$(command -v cmake || true)"; do
  if [ -x "$candidate" ] && version_ok "$required_cmake" "$(cmake_version "$candidate")"; then
    cmake_bin="$candidate"
    break
  fi
done
if { [ "$build_first" = 1 ] && [ -z "$cmake_bin" ]; } ||
   { [ "$python" = python3 ] && [ ! -x "$tools/bin/python" ]; }; then
  step "tool environment $tools (cmake >= $required_cmake, Python packages for the seeds)"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q "cmake>=$required_cmake" ninja zarr==3.1.6 \
    numcodecs==0.16.6 google-crc32c
fi
[ -z "$cmake_bin" ] && cmake_bin="$tools/bin/cmake"
[ "$python" = python3 ] && [ -x "$tools/bin/python" ] && python="$tools/bin/python"

# --- build ------------------------------------------------------------------------------------
if [ "$build_first" = 1 ]; then
  step "build ($build)"
  # -O2 -g without -DNDEBUG: assertions stay on.
  CC=clang CXX=clang++ "$cmake_bin" -S "$repo" -B "$build" -G Ninja \
    -DZARR_DEVICE_FUZZ=ON -DZARR_DEVICE_CUDA=OFF -DZARR_DEVICE_BUILD_TESTS=OFF \
    -DZARR_DEVICE_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g" >/dev/null
  ninja -C "$build" "${targets[@]}"
fi
for t in "${targets[@]}"; do
  [ -x "$build/$t" ] || { echo "fuzz.sh: $build/$t is not built" >&2; exit 1; }
done

# --- seeds ------------------------------------------------------------------------------------
step "seed corpora"
rm -rf "$build/seeds" "$build/tables"
mkdir -p "$build/tables" "$build/logs"
# Every built target's table (fuzz_metadata takes documents made from the others' entries too).
for t in "${all_targets[@]}"; do
  [ -x "$build/$t" ] && ZARR_DEVICE_FUZZ_TABLE="$build/tables/$t.json" "$build/$t"
done
max_len_args=()
for t in "${targets[@]}"; do
  mkdir -p "$build/seeds/$t" "$build/corpus/$t" "$build/findings/$t" "$build/quarantine/$t"
  ZARR_DEVICE_FUZZ_SEEDS="$build/seeds/$t" "$build/$t"
  max_len_args+=(--max-len "$t=$(max_len_of "$t")")
done
"$python" "$repo/cpp/fuzz/make_seeds.py" --tables "$build/tables" --golden "$repo/python/tests/golden" \
  --out "$build/seeds" --only "${targets[*]}" "${max_len_args[@]}"

# --- runs -------------------------------------------------------------------------------------
# After libFuzzer stopped on a finding: moves the input it stopped on (its newest artifact, named
# by the SHA-1 of its bytes) out of the seeds and the corpus, so that the next start does not stop
# on it again. Returns non-zero when that input was in neither (it was found by mutation).
quarantine_last() {
  local t="$1" artifact sha moved=1
  artifact="$(find "$build/findings/$t" -type f -printf '%T@ %f\n' | sort -n | tail -1 |
    cut -d' ' -f2)"
  [ -n "$artifact" ] || return 1
  sha="${artifact##*-}"
  while read -r sum file; do
    if [ "$sum" = "$sha" ]; then
      mv -f "$file" "$build/quarantine/$t/" && moved=0
    fi
  done < <(find "$build/seeds/$t" "$build/corpus/$t" -type f -exec sha1sum {} +)
  return "$moved"
}

run_target() {
  local t="$1" bin="$build/$1" log="$build/logs/$1.log" rc=0 starts=0
  local dict=()
  [ -f "$repo/cpp/fuzz/$t.dict" ] && dict=("-dict=$repo/cpp/fuzz/$t.dict")
  local -a flags
  read -r -a flags <<<"$(libfuzzer_flags "$t")"
  flags+=(-print_final_stats=1 "-artifact_prefix=$build/findings/$t/" "${dict[@]}")
  : >"$log"
  # A corpus grown over many runs is merged down to the inputs that add coverage first.
  if [ "$(find "$build/corpus/$t" -type f | wc -l)" -gt 4000 ]; then
    echo "=== fuzz.sh: merge the corpus" >>"$log"
    rm -rf "$build/corpus/$t.merged"
    mkdir -p "$build/corpus/$t.merged"
    # shellcheck disable=SC2046 # the flags are words
    if "$bin" $(libfuzzer_flags "$t") -merge=1 "$build/corpus/$t.merged" "$build/corpus/$t" \
      >"$build/logs/$t.merge.log" 2>&1; then
      rm -rf "$build/corpus/$t"
      mv "$build/corpus/$t.merged" "$build/corpus/$t"
    else
      rm -rf "$build/corpus/$t.merged"
    fi
  fi
  local deadline=$((SECONDS + seconds))
  # Fork mode drops seeds that are findings without a word: run them alone first, reporting and
  # setting aside those. (Otherwise a start that stops on a seed sets it aside below.)
  while [ "$mode" = fork ] && [ "$starts" -lt 50 ]; do
    starts=$((starts + 1))
    echo "=== fuzz.sh: run the corpus (-runs=0)" >>"$log"
    rc=0
    "$bin" "${flags[@]}" -runs=0 "$build/corpus/$t" "$build/seeds/$t" >>"$log" 2>&1 || rc=$?
    [ "$rc" = 0 ] && break
    quarantine_last "$t" || break
  done
  if [ "$rc" = 0 ] || [ "$mode" != stop ]; then
    while [ "$starts" -lt 500 ]; do
      local left=$((deadline - SECONDS))
      [ "$left" -ge 2 ] || break
      starts=$((starts + 1))
      echo "=== fuzz.sh: fuzz for $left s" >>"$log"
      rc=0
      if [ "$mode" = fork ]; then
        "$bin" "${flags[@]}" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 \
          -max_total_time="$left" "$build/corpus/$t" "$build/seeds/$t" >>"$log" 2>&1 || rc=$?
      else
        "$bin" "${flags[@]}" -max_total_time="$left" "$build/corpus/$t" "$build/seeds/$t" \
          >>"$log" 2>&1 || rc=$?
      fi
      [ "$rc" = 0 ] && break
      [ "$mode" = stop ] && break
      quarantine_last "$t" || true
    done
  fi
  echo "$rc" >"$build/logs/$t.rc"
  echo "$starts" >"$build/logs/$t.starts"
}

case "$mode" in
  restart) how="restarted after each finding" ;;
  fork) how="libFuzzer fork mode" ;;
  stop) how="stopping at the first finding" ;;
esac
step "fuzzing ${targets[*]} for $seconds s each ($jobs at a time, $how)"
for t in "${targets[@]}"; do
  find "$build/findings/$t" -type f -printf '%f\n' | sort >"$build/logs/$t.before"
done
running=0
for t in "${targets[@]}"; do
  echo "  $t: started $(date +%T), log $build/logs/$t.log"
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

# --- summary ----------------------------------------------------------------------------------
# The signature of a reproducer: the harness's FINDING line, or the sanitizer's or libFuzzer's
# error (or the uncaught exception's type and message) with the first engine frames of its stack.
signature() {
  local t="$1" file="$2" out finding what="" frame=""
  # shellcheck disable=SC2046 # the flags are words
  out="$(timeout 120 "$build/$t" $(libfuzzer_flags "$t") "$file" 2>&1 || true)"
  finding="$(grep -m1 -o 'FINDING: .*' <<<"$out" || true)"
  if [ -n "$finding" ]; then echo "$finding"; return; fi
  what="$(grep -m1 -oE "terminate called after throwing an instance of '[^']*'" <<<"$out" |
    sed "s/terminate called after throwing an instance of/uncaught/" || true)"
  [ -n "$what" ] && what="$what: $(grep -m1 -o 'what():.*' <<<"$out" | cut -c9-120 || true)"
  [ -z "$what" ] && what="$(grep -m1 -oE '(ERROR: [A-Za-z]+: [a-z-]+( \(malloc\([0-9]+\)\))?|runtime error: .*)' <<<"$out" |
    sed -E 's/malloc\([0-9]+\)/malloc(N)/' | cut -c1-140 || true)"
  # The first two engine frames, leaving out the allocation itself.
  frame="$(grep -E '#[0-9]+ .* in .*/cpp/src/' <<<"$out" | grep -v 'cpp/src/basics/buffer.cpp' |
    head -2 | sed -E 's/.* in ([^(]*)\(.* (\/.*\/)?(cpp\/src\/[^ ]*).*/\1 (\3)/' |
    paste -sd'<' | sed 's/</ < /g' || true)"
  # (An RSS-limit report comes from a watcher thread and may name another input than the culprit.)
  echo "${what:-does not reproduce alone (replay: $build/$t $file)}${frame:+ at $frame}"
}

# A slow unit is a finding when its replay alone takes half the timeout or more; otherwise it is
# reported with its replay's time and does not fail the run. Prints "slow N.NN s" or "fast N.NN s".
slow_unit_verdict() {
  local t="$1" file="$2" begin end took
  begin="$(date +%s.%N)"
  # shellcheck disable=SC2046 # the flags are words
  timeout 120 "$build/$t" $(libfuzzer_flags "$t") "$file" >/dev/null 2>&1 || true
  end="$(date +%s.%N)"
  took="$(awk -v b="$begin" -v e="$end" 'BEGIN { printf "%.2f", e - b }')"
  if awk -v s="$took" -v limit="$timeout_s" 'BEGIN { exit !(s >= limit / 2) }'; then
    echo "slow $took s"
  else
    echo "fast $took s"
  fi
}

status=0
summary="$build/logs/summary.txt"
{
  printf '\n%-18s %6s %11s %7s %7s %8s %7s %8s %6s\n' target seconds executions exec/s cov \
    features corpus findings starts
  for t in "${targets[@]}"; do
    log="$build/logs/$t.log"
    # Every libFuzzer start ends with "stat::number_of_executed_units: N"; coverage lines read
    # "#N <event> cov: C ft: F corp: K/..." (fork mode: "#N: cov: C ft: F corp: K exec/s E ...").
    execs="$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$log" |
      awk '{ s += $1 } END { print s + 0 }')"
    if [ "$mode" = fork ]; then
      execs=$((execs + $(sed -nE 's/^#([0-9]+): cov: .*/\1/p' "$log" | tail -1 | awk '{ print $1 + 0 }')))
    fi
    last="$(grep -E '^#[0-9]+:?[[:space:]].* cov: ' "$log" | tail -1 || true)"
    cov="$(grep -oE ' cov: [0-9]+' "$log" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')"
    ft="$(grep -oE ' ft: [0-9]+' "$log" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')"
    corp="$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")"
    find "$build/findings/$t" -type f -printf '%f\n' | sort >"$build/logs/$t.after"
    new="$(comm -13 "$build/logs/$t.before" "$build/logs/$t.after" | wc -l)"
    # Slow units whose replay alone is fast are noted below, not counted.
    : >"$build/logs/$t.slow_only_under_load"
    while read -r f; do
      [ -n "$f" ] || continue
      verdict="$(slow_unit_verdict "$t" "$build/findings/$t/$f")"
      if [ "${verdict%% *}" = fast ]; then
        echo "$f ${verdict#fast }" >>"$build/logs/$t.slow_only_under_load"
        new=$((new - 1))
      fi
    done < <(comm -13 "$build/logs/$t.before" "$build/logs/$t.after" | grep '^slow-unit-' || true)
    printf '%-18s %6s %11s %7s %7s %8s %7s %8s %6s\n' "$t" "$seconds" "$execs" \
      "$((execs / (seconds > 0 ? seconds : 1)))" "$cov" "$ft" "${corp:-?}" "$new" \
      "$(cat "$build/logs/$t.starts" 2>/dev/null || echo '?')"
    # A target that never ran (a build or start-up problem) fails the run too.
    if [ "$new" -gt 0 ] || [ "$execs" = 0 ]; then status=1; fi
  done
  echo "(cov: covered code edges of the instrumented engine and target; starts: libFuzzer runs)"
  for t in "${targets[@]}"; do
    while read -r f took; do
      [ -n "$f" ] || continue
      printf '\n%s: slow only under load (not a finding): %s ran for %s s or more while fuzzing,\n' \
        "$t" "$f" "$timeout_s"
      printf '  %s alone (replay: %s %s)\n' "$took" "$build/$t" "$build/findings/$t/$f"
    done <"$build/logs/$t.slow_only_under_load"
    new_files="$(comm -13 "$build/logs/$t.before" "$build/logs/$t.after" |
      grep -vxF -f <(cut -d' ' -f1 "$build/logs/$t.slow_only_under_load") || true)"
    [ -z "$new_files" ] && continue
    printf '\n%s: %s new reproducer(s) in %s, by signature:\n' "$t" "$(wc -l <<<"$new_files")" \
      "$build/findings/$t"
    declare -A seen=()
    classified=0
    while read -r f; do
      classified=$((classified + 1))
      if [ "$classified" -gt 40 ]; then
        echo "  (more reproducers not classified)"
        break
      fi
      sig="$(signature "$t" "$build/findings/$t/$f")"
      key="$(sed -E 's/[0-9]+/N/g' <<<"$sig")"  # one line per kind, whatever its numbers
      if [ -z "${seen[$key]:-}" ]; then
        seen[$key]="$f"
        printf '  %s\n      e.g. %s\n' "$sig" "$build/findings/$t/$f"
      fi
    done <<<"$new_files"
    unset seen
  done
} >"$summary"
cat "$summary"
if [ "$status" = 0 ]; then
  echo "fuzz.sh: no findings"
else
  echo "fuzz.sh: FINDINGS (see above; summary in $summary)"
fi
exit "$status"
