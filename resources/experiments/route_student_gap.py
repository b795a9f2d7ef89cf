#!/usr/bin/env python3
"""Where a routed model's student path loses cross-entropy against its teacher path (issue 25).

Draws N sequences of the synthetic task (datasets/synthetic.h: the prompt "<letter>>", then 64 body
characters of '_' holding the letter 8 times from a uniform start in [0, 56], every body character
'!' with probability 1/16), scores them with `ftx score` on both router paths of one checkpoint,
and prints, per event of the predicted token (start: the target's first position; letter: its
other seven; noise: a '!' outside the target; before, after: a '_' before or after the target), the
mean CE on each path and the share of those tokens each routed block computed on each path.

    resources/experiments/route_student_gap.py CHECKPOINT [--n 256] [--seed 1] [--ftx build/app/ftx]

A checkpoint is a run's step folder, e.g. $EXP/runs.checkpoints/sdt-0.5-s1/step-000400. The draw
is Python's own (not the dataset's Philox stream): the same task, other sequences.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ALPHABET = "_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ"
EVENTS = ("start", "letter", "noise", "before", "after")


def draw(rng):
    letter = rng.choice(ALPHABET[3:])
    start = rng.randrange(57)
    body = ["_"] * 64
    for p in range(start, start + 8):
        body[p] = letter
    for p in range(64):
        if rng.randrange(16) == 0:
            body[p] = "!"
    events = []
    for p in range(64):
        if p == start:
            events.append("start")
        elif start < p < start + 8:
            events.append("letter")
        elif body[p] == "!":
            events.append("noise")
        else:
            events.append("before" if p < start else "after")
    return [ALPHABET.index(c) for c in letter + ">" + "".join(body)], [None, None] + events


def score(ftx, checkpoint, path, router):
    out = subprocess.run([ftx, "score", "--checkpoint", checkpoint, "--input", path, "--router", router],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"route_student_gap: ftx score --router {router}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ftx", default="build/app/ftx")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    seqs = [draw(rng) for _ in range(a.n)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "seqs.json")
        with open(path, "w") as f:
            json.dump({"tokens": [s[0] for s in seqs]}, f)
        paths = {r: score(a.ftx, a.checkpoint, path, r) for r in ("teacher", "student")}
    blocks = [b["block"] for b in paths["teacher"]["routing"]["blocks"]]
    ce = {r: {e: [] for e in EVENTS} for r in paths}
    comp = {r: {(blk, e): [] for blk in blocks for e in EVENTS} for r in paths}
    for r, res in paths.items():
        for i, (_, events) in enumerate(seqs):
            lp = res["logprobs"][i]
            computed = [(b["block"], set(b["computed"][i])) for b in res["routing"]["blocks"]]
            for t, e in enumerate(events):
                if e is None:
                    continue
                ce[r][e].append(-lp[t - 1])  # logprobs[t - 1]: the token at position t
                for blk, positions in computed:
                    comp[r][(blk, e)].append(1.0 if t in positions else 0.0)
    mean = lambda v: sum(v) / len(v) if v else float("nan")
    print(f"checkpoint {a.checkpoint}, {a.n} sequences; CE over the body: teacher "
          f"{mean(sum(ce['teacher'].values(), [])):.4f}, student {mean(sum(ce['student'].values(), [])):.4f}")
    head = "| event | tokens | CE teacher | CE student | student - teacher | share of the gap |"
    for blk in blocks:
        head += f" block {blk} computed: teacher / student |"
    print(head)
    print("|" + "---|" * (6 + len(blocks)))
    gap = sum(sum(ce["student"][e]) - sum(ce["teacher"][e]) for e in EVENTS)
    for e in EVENTS:
        d = sum(ce["student"][e]) - sum(ce["teacher"][e])
        row = (f"| {e} | {len(ce['teacher'][e])} | {mean(ce['teacher'][e]):.4f} | {mean(ce['student'][e]):.4f} | "
               f"{mean(ce['student'][e]) - mean(ce['teacher'][e]):+.4f} | {d / gap if gap else float('nan'):.2f} |")
        for blk in blocks:
            row += f" {mean(comp['teacher'][(blk, e)]):.2f} / {mean(comp['student'][(blk, e)]):.2f} |"
        print(row)


if __name__ == "__main__":
    main()
