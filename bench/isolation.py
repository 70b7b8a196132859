"""Rounds (and runs) needed to isolate k bad nodes among N, against the two naive baselines.

A *round* is one batch of multi-node all_reduce runs on disjoint groups, launched together
(its wall time is one NCCL run); a *run* is one all_reduce, i.e. node time. For each
(N, k) the bad nodes are placed at random, ``--trials`` times, and the worst and mean
over the trials are printed for both split strategies of :func:`acceptance.isolation.isolate`.

Baselines: all pairs, disjoint pairs in parallel (round-robin: N-1 rounds, N(N-1)/2 runs);
one known-good node paired with every other node in turn (N-1 rounds and runs).
The goal of issue 7: <= k * ceil(log2 N) + 2 rounds.

    python bench/isolation.py [--trials 50] [--seed 7] [--links] [--max-parallel M]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from acceptance.isolation import FaultModel, all_pairs_baseline, bound, isolate, link, one_good_baseline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--links", action="store_true", help="also place one bad link between good nodes")
    ap.add_argument("--max-parallel", type=int, default=None, help="cap on runs per round (default: none)")
    args = ap.parse_args()
    header = (f"{'N':>5} {'k':>2} {'goal':>5} | {'pairs rnd max/mean':>18} {'runs mean':>9} | "
              f"{'binary rnd max/mean':>19} {'runs mean':>9} | {'all-pairs rnd/runs':>18} | {'one-good rnd':>12}")
    print(header)
    print("-" * len(header))
    t0 = time.perf_counter()
    for n in (16, 64, 256, 1024):
        nodes = [f"gpu-{i:04d}" for i in range(n)]
        for k in (1, 2, 4):
            rng = random.Random(f"{args.seed}-{n}-{k}")
            stats: dict[str, list[tuple[int, int]]] = {"pairs": [], "binary": []}
            for _ in range(args.trials):
                picks = rng.sample(nodes, k + (2 if args.links else 0))
                bad = frozenset(picks[:k])
                links = frozenset({link(picks[k], picks[k + 1])}) if args.links else frozenset()
                for split in ("pairs", "binary"):
                    res = isolate(nodes, FaultModel(bad, links), split=split,
                                  confirm=2 if args.links else 1, max_parallel=args.max_parallel)
                    if res.bad_nodes != bad or res.bad_links != links or res.unresolved:
                        raise SystemExit(f"wrong answer: N={n} k={k} {split}: {sorted(res.bad_nodes)} != {sorted(bad)}")
                    stats[split].append((res.n_rounds, res.n_tests))
            ap_r, ap_t = all_pairs_baseline(n)
            og_r, _ = one_good_baseline(n)
            cols = []
            for split in ("pairs", "binary"):
                rounds = [r for r, _ in stats[split]]
                runs = [t for _, t in stats[split]]
                cols.append(f"{max(rounds):>8} / {statistics.mean(rounds):>7.2f} {statistics.mean(runs):>9.1f}")
            print(f"{n:>5} {k:>2} {bound(n, k):>5} | {cols[0]:>28} | {cols[1]:>29} | "
                  f"{ap_r:>7} / {ap_t:>8} | {og_r:>12}")
    print(f"\n{args.trials} random placements per row; all answers exact; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
