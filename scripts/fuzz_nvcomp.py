#!/usr/bin/env python3
"""The nvCOMP campaign: hostile frames against nvCOMP's batched decoders on the GPU machine.

Builds cpp/fuzz/nvcomp_campaign.cu (its header says what a case is and how each is judged) and
runs it over ranges of cases per codec in child processes, several at a time on the one GPU. A
child that faults its CUDA context (exit 2) or hangs past its watchdog (exit 3) names the batch
it was decoding (with the default batches of one, the case); the campaign records it and starts
a fresh child after it. Optionally runs a share of the cases under compute-sanitizer's memcheck,
which sees reads and writes outside any allocation that the guard pages cannot.

    python3 scripts/fuzz_nvcomp.py --cases 2000 --seconds 300 --out /tmp/nvcomp-campaign

Writes `cases.jsonl` (every case's line), `summary.json` and `summary.md` (counts per codec and
class, per mutation for the classes that matter, and each finding with the command that replays
it) to --out.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "cpp" / "fuzz" / "nvcomp_campaign.cu"
CODECS = ("zstd", "gzip", "deflate", "lz4")
# Classes that would make a decode in the caller's process unsafe or wrong.
FINDINGS = ("fault", "hang", "guard_overwrite", "bad_size", "wrong_bytes", "silent_wrong")


def nvcomp_dir() -> Path:
    import nvidia.libnvcomp as m  # the wheel the `gpu` extra installs

    return Path(os.path.dirname(m.__file__))


def build(binary: Path, arch: str) -> None:
    n = nvcomp_dir()
    cmd = [
        "nvcc", "-O2", "-std=c++17", f"-arch={arch}", f"-I{n / 'include'}", str(SOURCE),
        f"-L{n / 'lib64'}", "-l:libnvcomp.so.6", "-lzstd", "-lz", "-llz4",
        "-Xlinker", f"-rpath={n / 'lib64'}", "-o", str(binary),
    ]
    subprocess.run(cmd, check=True)


class Campaign:
    """Runs cases in child processes, `workers` at a time on the one GPU (each child has a CUDA
    context of its own, so one that faults leaves the others be). A child decodes its range of
    cases a batch at a time and ends at the first fault or hang; the campaign records it against
    that batch and starts a fresh child after it. With batches of one, every fault and hang is
    pinned to its case."""

    def __init__(self, binary: Path, seed: int, batch: int, watchdog: float, workers: int,
                 deadline: float, log: Path) -> None:
        self.binary = binary
        self.seed = seed
        self.batch = batch
        self.watchdog = watchdog
        self.workers = workers
        self.deadline = deadline
        self.log = log
        self.cases: list[dict[str, object]] = []
        self.events: list[dict[str, object]] = []
        self.lock = threading.Lock()

    def command(self, codec: str, first: int, count: int, batch: int, frames: bool) -> list[str]:
        return [str(self.binary), "--codec", codec, "--seed", str(self.seed), "--first", str(first),
                "--count", str(count), "--batch", str(batch), "--watchdog", str(self.watchdog),
                "--temp-from-frames", "1" if frames else "0"]

    def record(self, lines: list[dict[str, object]]) -> None:
        with self.lock, self.log.open("a") as f:
            for x in lines:
                f.write(json.dumps(x) + "\n")
                (self.cases if "i" in x else self.events).append(x)

    def run_range(self, codec: str, first: int, count: int, frames: bool) -> None:
        at, end = first, first + count
        while at < end and time.monotonic() < self.deadline:
            cmd = self.command(codec, at, end - at, self.batch, frames)
            left = max(1.0, self.deadline - time.monotonic())
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
                out, rc = done.stdout, done.returncode
            except subprocess.TimeoutExpired as e:
                out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                rc = -1
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            for x in lines:
                x["frames"] = frames
                x.setdefault("codec", codec)
            cases = [x for x in lines if "class" in x]
            ended = next((x for x in lines if "class" not in x), None)
            if ended is not None and "error" in ended:
                raise RuntimeError(f"{codec}: the campaign itself failed: {ended['error']}")
            if rc == -1:
                self.record(cases)
                return  # out of time
            if rc != 0 and ended is None:
                # Died without a word: the batch after its last case.
                ended = {"fault": f"child ended with {rc}", "first": at + len(cases),
                         "count": min(self.batch, end - at - len(cases)), "codec": codec,
                         "frames": frames}
            if ended is not None:
                ended["class"] = "fault" if "fault" in ended else "hang"
                ended["replay"] = " ".join(
                    self.command(codec, int(ended["first"]), int(ended["count"]),
                                 int(ended["count"]), frames))
                self.record([*cases, ended])
                at = int(ended["first"]) + int(ended["count"])
            else:
                self.record(cases)
                at = end

    def run_codec(self, codec: str, total: int, frames: bool) -> None:
        share = -(-total // self.workers)
        ranges = [(i * share, min(share, total - i * share)) for i in range(self.workers)
                  if i * share < total]
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            for f in [pool.submit(self.run_range, codec, a, n, frames) for a, n in ranges]:
                f.result()


def sanitizer_pass(campaign: Campaign, codec: str, count: int) -> dict[str, object]:
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        for d in ("/usr/local/cuda/bin", "/usr/local/cuda/compute-sanitizer"):
            if Path(d, "compute-sanitizer").exists():
                tool = str(Path(d, "compute-sanitizer"))
    if tool is None:
        return {"codec": codec, "ran": False, "why": "compute-sanitizer not found"}
    cmd = [tool, "--tool", "memcheck", "--print-limit", "20",
           *campaign.command(codec, 0, count, campaign.batch, False)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"codec": codec, "ran": True, "cases": count, "result": "timed out"}
    summary = [line for line in done.stdout.splitlines() if "ERROR SUMMARY" in line]
    errors = [line for line in done.stdout.splitlines() if line.startswith("========= Invalid")]
    return {"codec": codec, "ran": True, "cases": count, "summary": summary[-1:] or ["none"],
            "first_errors": errors[:5], "rc": done.returncode}


def summarize(campaign: Campaign, sanitizer: list[dict[str, object]], seconds: float,
              out: Path, quiet: bool = False) -> None:
    per_codec: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    per_mutation: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    findings: list[dict[str, object]] = []
    for c in campaign.cases:
        name = f"{c['codec']}{' (temp from frames)' if c.get('frames') else ''}"
        per_codec[name][str(c["class"])] += 1
        per_mutation[(name, str(c["mutation"]))][str(c["class"])] += 1
        if c["class"] in FINDINGS:
            findings.append(c)
    for e in campaign.events:
        name = f"{e['codec']}{' (temp from frames)' if e.get('frames') else ''}"
        per_codec[name][str(e["class"])] += int(e["count"])
        for mutation in str(e.get("cases", "")).split(", "):
            per_mutation[(name, mutation.split(" ")[0])][str(e["class"])] += 1
    summary = {
        "seed": campaign.seed, "seconds": round(seconds, 1),
        "per_codec": {k: dict(v) for k, v in per_codec.items()},
        "events": campaign.events, "findings": findings[:200], "sanitizer": sanitizer,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    classes = ["equal", "both_reject", "gpu_rejects_valid", "caught_by_size", "lenient_same",
               *FINDINGS]
    lines = [f"seed {campaign.seed}, {seconds:.0f} s", "",
             "| decoder | cases | " + " | ".join(classes) + " |",
             "|---|---|" + "---|" * len(classes)]
    for name, counts in sorted(per_codec.items()):
        lines.append(f"| {name} | {sum(counts.values())} | "
                     + " | ".join(str(counts.get(k, 0)) for k in classes) + " |")
    lines += ["", "Writes outside the output (guard_overwrite), how far past its end:", ""]
    for name in sorted(per_codec):
        far = [int(c.get("past_end", 0)) for c in campaign.cases if c["class"] == "guard_overwrite"
               and f"{c['codec']}{' (temp from frames)' if c.get('frames') else ''}" == name]
        if far:
            lines.append(f"- {name}: {len(far)} cases; up to {max(far)} bytes; "
                         f"{sum(f >= 4096 for f in far)} reach the end of the 4 KiB guard")
    lines += ["", "Findings by damage:", ""]
    for (name, mutation), counts in sorted(per_mutation.items()):
        bad = {k: v for k, v in counts.items() if k in FINDINGS or k == "lenient_same"}
        if bad:
            lines.append(f"- {name} / {mutation}: {bad} of {sum(counts.values())}")
    lines += ["", "Faults and hangs:", ""]
    lines += [f"- {json.dumps(e)}" for e in campaign.events] or ["- none"]
    lines += ["", "compute-sanitizer memcheck:", ""]
    lines += [f"- {json.dumps(s)}" for s in sanitizer] or ["- not run"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000, help="cases per codec")
    p.add_argument("--frames-cases", type=int, default=500,
                   help="zstd cases with temporary memory sized from the frames (0: none)")
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=1, help="cases per nvCOMP call")
    p.add_argument("--workers", type=int, default=8, help="child processes at a time")
    p.add_argument("--watchdog", type=float, default=10.0, help="seconds a batch may take")
    p.add_argument("--seconds", type=float, default=3600.0,
                   help="stop starting children after this long, then sum up")
    p.add_argument("--sanitizer-cases", type=int, default=0,
                   help="cases per codec to run again under compute-sanitizer memcheck")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--binary", type=Path, help="a built campaign (default: build one)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    binary = args.binary or args.out / "nvcomp_campaign"
    if args.binary is None:
        build(binary, args.arch)
    start = time.monotonic()
    log = args.out / "cases.jsonl"
    log.unlink(missing_ok=True)
    campaign = Campaign(binary, args.seed, args.batch, args.watchdog, args.workers,
                        start + args.seconds, log)
    codecs = args.codecs.split(",")
    for codec in codecs:
        print(f"{codec}: {args.cases} cases", flush=True)
        campaign.run_codec(codec, args.cases, frames=False)
        if codec == "zstd" and args.frames_cases:
            print(f"zstd, temporary memory from the frames: {args.frames_cases} cases", flush=True)
            campaign.run_codec(codec, args.frames_cases, frames=True)
        summarize(campaign, [], time.monotonic() - start, args.out, quiet=True)  # so far
    sanitizer = [sanitizer_pass(campaign, c, args.sanitizer_cases)
                 for c in codecs] if args.sanitizer_cases else []
    summarize(campaign, sanitizer, time.monotonic() - start, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
