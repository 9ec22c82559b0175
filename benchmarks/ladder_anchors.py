"""Measure the rating anchors of ``pawn play`` ladder rungs that Stockfish does not document
(``sf-skill<S>-depth<D>``; :data:`pawn.play.ladder.MEASURED_ANCHORS`), on the ladder's own scale
(random mover = 0 by convention, greedy = :data:`pawn.play.ladder.GREEDY_ANCHOR` measured
against it).

Usage: python benchmarks/ladder_anchors.py [--rungs sf-skill0-depth1,...] [--against greedy,...]
       [--games 200] [--max-ply 400] [--seed 123] [--slots 2]

Each rung in ``--rungs`` plays ``--games`` games (colours alternating, ``pawn play``'s rules:
Board.outcome() without claims, ``--max-ply`` plies scored a draw, the default opening
book of ``pawn play``) against each rung of
``--against`` (anchored rungs: random, greedy, or a rung measured earlier in the same command,
so a chain ``--rungs A,B`` measures B against A too; ``--neighbours N`` keeps only the last N
anchored rungs as opponents, the closest in strength on an ordered chain), and one maximum-likelihood fit over all those games (:func:`pawn.play.ladder.fit_elo`,
opponents at their anchors) gives the rung's anchor and its 95 % likelihood-ratio interval. The
interval does not include the uncertainty of the opponents' own anchors. Prints a table and one
JSON line per rung.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rungs", default="sf-skill0-depth1-random75,sf-skill0-depth1-random50,sf-skill0-depth1-random25,sf-skill0-depth1,sf-1350")
    ap.add_argument("--against", default="random,greedy")
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--max-ply", type=int, default=400)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--neighbours", type=int, default=2,
                    help="play each rung against only the last N anchored rungs (the closest in strength on a chain)")
    args = ap.parse_args()

    from pawn.play.ladder import fit_elo, rung
    from pawn.play.config import PlayConfig
    from pawn.play.match import play_match

    book = PlayConfig().first_moves

    anchors: dict[str, float] = {}
    for name in args.against.split(","):
        r = rung(name, 1)
        if r.effective_elo is None:
            raise SystemExit(f"--against {name}: has no anchor")
        anchors[name] = float(r.effective_elo)
        r.close()
    for name in args.rungs.split(","):
        cand = rung(name, args.slots, args.seed)
        opp_anchor, scores, rows = [], [], []
        t0 = time.perf_counter()
        for k, opp_name in enumerate(list(anchors)[-args.neighbours:]):
            opp = rung(opp_name, args.slots, args.seed + 1 + k)
            try:
                res = play_match(cand, opp, games=args.games, temperature=0.0, first_moves=book, max_ply=args.max_ply,
                                 seed=args.seed, slots=args.slots, cell=k)
            finally:
                opp.close()
            s = [{"win": 1.0, "draw": 0.5, "loss": 0.0}[r.result] for r in res.records if r.result is not None]
            w, d, l = s.count(1.0), s.count(0.5), s.count(0.0)
            rows.append(f"{opp_name} ({anchors[opp_name]:.0f}): +{w} ={d} -{l}")
            opp_anchor += [anchors[opp_name]] * len(s)
            scores += s
        cand.close()
        fit = fit_elo(opp_anchor, scores)
        lo, hi = fit["elo_ci95"]
        print(f"{name:>20}  anchor {fit['elo']:+.0f}  95% [{lo:+.0f}, {hi:+.0f}]  {fit['games']} games  "
              f"{'; '.join(rows)}  ({time.perf_counter() - t0:.0f} s)", flush=True)
        print(json.dumps({"rung": name, "against": rows, "seed": args.seed, "max_ply": args.max_ply, **fit}), flush=True)
        anchors[name] = fit["elo"]


if __name__ == "__main__":
    main()
