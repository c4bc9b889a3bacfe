"""This checkout against an earlier commit, black-box over HTTP: turns/s, CPU per turn and
bytes written per turn of ``netclaw run``.

Each side is ``python -m netclaw.cli run`` as a subprocess on the same config (journal
``synchronous=full``) and the same scripted provider process (``tests.fakes.scripted_openai``:
echo replies, streamed). The reference side runs from a ``git worktree`` of ``--ref`` made in
a temporary directory (and removed after). A round starts each side fresh on an empty data
dir, warms every session with one turn, then drives ``--sessions`` sessions in closed loop
(each sends its next message when its previous answer came back) over
``POST /api/sessions/{id}/messages?wait=1`` for ``--seconds``. The sides alternate, first
one then the other, for ``--rounds`` rounds; the figures are medians over rounds.

Per side and round, over the measured window only:

- turns/s: answers received per second;
- CPU per turn: the daemon process's user+system time (/proc/PID/stat, all threads) per turn;
- bytes written per turn: the daemon's ``write_bytes`` (/proc/PID/io: what reached the block
  layer's accounting, WAL and checkpoints included) per turn;
- client-seen latency p50.

The default reference is ``8a014fd``, the commit before the third wave.

    python bench/ab.py [--ref 8a014fd] [--sessions 50] [--seconds 20] [--rounds 3]
    python bench/ab.py --quick       # 10 sessions, 3 s, 1 round: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as c
import _procstat as ps
import aiohttp
import httpx
from _provider import ProviderProcess

MODEL = "scripted-echo"
REF = "8a014fd"


@dataclass
class Round:
    turns: int
    elapsed: float
    cpu: float
    written: int
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.turns / self.elapsed

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.turns * 1e6

    @property
    def written_kb(self) -> float:
        return self.written / self.turns / 1024


def write_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/io has no write_bytes line")


def config_for(work: Path, base_url: str) -> dict[str, Any]:
    data = work / "data"
    return {
        "data_dir": str(data),
        "providers": {"local": {"type": "openai", "base_url": base_url, "timeout_s": 30, "max_retries": 2}},
        "models": {
            "main": {"provider": "local", "model": MODEL, "context_window": 32768, "max_output_tokens": 256}
        },
        "gateway": {"host": "127.0.0.1", "port": c.free_port()},
        "tools": {"workspace_dir": str(data / "workspace")},
        "journal": {"synchronous": "full"},
    }


class Side:
    """One tree (this checkout or the reference's worktree) and its daemon for one round."""

    def __init__(self, name: str, tree: Path) -> None:
        self.name = name
        self.tree = tree
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.token = ""

    def start(self, work: Path, base_url: str) -> None:
        work.mkdir(parents=True)
        config = config_for(work, base_url)
        path = work / "netclaw.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")}
        env["PYTHONPATH"] = str(self.tree)
        self._log = (work / "daemon.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "netclaw.cli", "run", "--config", str(path), "--log-level", "warning"],
            cwd=self.tree,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.base_url = f"http://127.0.0.1:{config['gateway']['port']}"
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name}: the daemon exited with {self.proc.returncode}; see {work}/daemon.log"
                )
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no /healthz within 60 s; see {work}/daemon.log")
            time.sleep(0.1)
        self.token = (Path(config["data_dir"]) / "control.token").read_text(encoding="utf-8").strip()

    def stop(self) -> None:
        assert self.proc is not None
        c.stop_process(self.proc, 30)
        self._log.close()


async def drive(side: Side, sessions: int, seconds: float, texts: list[str]) -> Round:
    assert side.proc is not None
    pid = side.proc.pid
    headers = {"Authorization": f"Bearer {side.token}"}
    connector = aiohttp.TCPConnector(limit=sessions + 4)
    async with aiohttp.ClientSession(side.base_url, headers=headers, connector=connector) as http:

        async def turn(sid: str, text: str) -> float:
            t0 = time.perf_counter()
            async with http.post(
                f"/api/sessions/{sid}/messages", params={"wait": "1"}, json={"text": text}
            ) as r:
                body = await r.json()
                if r.status != 200 or not body.get("reply"):
                    raise RuntimeError(f"{side.name}: turn in {sid} answered {r.status}: {body}")
            return time.perf_counter() - t0

        ids = [f"ab-{i}" for i in range(sessions)]
        await asyncio.gather(*(turn(sid, texts[i % len(texts)]) for i, sid in enumerate(ids)))
        latencies: list[float] = []
        cpu0, w0 = ps.process_cpu(pid), write_bytes(pid)
        deadline = time.perf_counter() + seconds

        async def one(i: int) -> int:
            n = 0
            while time.perf_counter() < deadline:
                latencies.append(await turn(ids[i], texts[(i * 7 + n + 1) % len(texts)]))
                n += 1
            return n

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(sessions)))
        elapsed = time.perf_counter() - t0
        cpu1, w1 = ps.process_cpu(pid), write_bytes(pid)
    return Round(sum(counts), elapsed, cpu1 - cpu0, w1 - w0, latencies)


def make_texts(count: int) -> list[str]:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    return [" ".join(words[(i + k) % len(words)] for k in range(6 + i % 9)) + f" #{i}" for i in range(count)]


def worktree(ref: str, into: Path) -> Path | None:
    """A worktree of ``ref`` under ``into``; None when this clone does not hold that commit."""
    known = subprocess.run(
        ["git", "-C", str(c.REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode != 0:
        return None
    tree = into / "ref"
    subprocess.run(
        ["git", "-C", str(c.REPO_ROOT), "worktree", "add", "--detach", str(tree), ref],
        check=True,
        capture_output=True,
    )
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--ref", default=REF, help="the commit to compare against (default: before the third wave)"
    )
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary directories go")
    c.add_quick(parser, sessions=10, seconds=3.0, rounds=1)
    args = c.apply_quick(parser.parse_args())
    texts = make_texts(200)
    load0 = c.machine_load()
    results: dict[str, list[Round]] = {"head": [], "ref": []}
    with c.temp_dir("netclaw-ab-", args.dir) as tmp:
        tree = worktree(args.ref, tmp)
        if tree is None:
            c.log(
                f"the reference commit {args.ref} is not in this clone (a shallow checkout? `git fetch --unshallow`)"
            )
            c.info("reference", f"{args.ref} unavailable: nothing measured")
            return 0 if args.quick else 2
        try:
            sides = [Side("head", c.REPO_ROOT), Side("ref", tree)]
            provider = ProviderProcess(tmp / "provider.log").start()
            try:
                for k in range(args.rounds):
                    order = sides if k % 2 == 0 else sides[::-1]
                    for side in order:
                        side.start(tmp / f"{side.name}-{k}", provider.base_url)
                        try:
                            result = asyncio.run(drive(side, args.sessions, args.seconds, texts))
                        finally:
                            side.stop()
                        results[side.name].append(result)
                        c.log(
                            f"round {k + 1} {side.name}: {result.rate:.0f} turns/s, {result.cpu_us:.0f} us CPU/turn, "
                            f"{result.written_kb:.1f} kB written/turn"
                        )
            finally:
                provider.stop()
        finally:
            subprocess.run(
                ["git", "-C", str(c.REPO_ROOT), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
    head, ref = results["head"], results["ref"]

    def med(rounds: list[Round], what: str) -> float:
        return c.median([getattr(r, what) for r in rounds])

    for name, rounds in results.items():
        lat = sorted(x for r in rounds for x in r.latencies)
        c.info(
            f"{name}_side",
            f"{med(rounds, 'rate'):.0f} turns/s, {med(rounds, 'cpu_us'):.0f} us CPU/turn, "
            f"{med(rounds, 'written_kb'):.1f} kB written/turn, client p50 {c.percentile(lat, 50) * 1e3:.1f} ms",
            "",
            f"median of {len(rounds)} rounds, {args.sessions} sessions x {args.seconds:g} s"
            + (" (this checkout)" if name == "head" else f" ({args.ref})"),
        )
    c.info("machine_load", f"{load0} at start, {c.machine_load()} at end")
    cpu_ratio = med(head, "cpu_us") / med(ref, "cpu_us")
    rate_ratio = med(head, "rate") / med(ref, "rate")
    written = med(head, "written_kb")
    c.info("written_per_turn_ref", med(ref, "written_kb"), "kB", f"({args.ref})")
    # Each round runs the two sides one after the other: their ratio within a round is
    # spared the machine's drift between rounds, which moves both medians by +-5 % here.
    for what, label in (("cpu_us", "cpu_per_turn"), ("rate", "turns_per_s")):
        paired = sorted(getattr(h, what) / getattr(r, what) for h, r in zip(head, ref, strict=True))
        c.info(
            f"{label}_vs_ref_paired",
            c.median(paired),
            "x",
            f"median of each round's ratio; {paired[0]:.2f}-{paired[-1]:.2f} over {len(paired)} rounds",
        )
    c.figure("cpu_per_turn_vs_ref", cpu_ratio, "x", "<= 0.9 x", cpu_ratio <= 0.9)
    c.figure("turns_per_s_vs_ref", rate_ratio, "x", ">= 1.1 x", rate_ratio >= 1.1)
    c.figure("written_per_turn", written, "kB", "<= 12 kB", written <= 12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
