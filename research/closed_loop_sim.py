"""Iteration-level simulation of the NIM concurrency benchmark's closed loop, as a check on the
closed-form TTFT of codesign.calibration.concurrency (VALIDATION.md §6.5).

C clients each send their next request (ISL prompt, OSL output tokens, both fixed) when the last
one ends; all start at t = 0 (the benchmark's synchronised start). Each engine step carries one
token of every decoding request and FCFS prompt chunks up to the token budget T (8,192, the `nim`
rows' assumed budget); a request that arrives after a step was scheduled waits for it; at most the
model's memory-filling batch runs. A step's time is the model's MixedStep(D, P) (model.md eq.
5.11a) of the row. Nothing is fitted. Writes research/results/closed_loop_sim.json: per TTFT row,
the measured TTFT, the fluid and closed-loop closed forms, and the simulated mean TTFT of the
first round (a synchronised burst), of the later rounds (the deterministic loop's steady state)
and of all three rounds.

    python research/closed_loop_sim.py            # ~5 min on one core
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

from codesign.calibration.concurrency import at_concurrency
from codesign.calibration.engine import max_batch, row_instance
from codesign.calibration.rows import read_rows
from codesign.model.serving import MixedStep

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "research" / "results" / "closed_loop_sim.json"
ROUNDS = 3
#: the client's turnaround: a request arrives this long after the step that ended its last one
CLIENT_S = 1e-4
#: prefill tokens are rounded to this grain when the step time is looked up (a cache)
GRAIN_TOKENS = 16


def simulate(step_s, clients: int, isl: int, osl: int, budget: int, slots: int) -> list[float]:
    """TTFT of every request, in completion order of their first tokens (first round first)."""
    cache: dict[tuple[int, int], float] = {}
    waiting = [(0.0, c) for c in range(clients)]
    running: list[dict] = []
    t, done, ttfts = 0.0, 0, []
    while done < clients * ROUNDS:
        while waiting and waiting[0][0] <= t and len(running) < slots:
            arrived, c = waiting.pop(0)
            running.append({"arrived": arrived, "left": isl, "decoded": 0, "client": c, "first": False})
        if not running:
            t = waiting[0][0]
            continue
        decodes = sum(r["first"] for r in running)
        room, chunks = budget - decodes, []
        for r in running:
            if not r["first"] and room > 0:
                x = min(r["left"], room)
                room -= x
                chunks.append((r, x))
        p = sum(x for _, x in chunks)
        key = (decodes, -(-p // GRAIN_TOKENS))
        if key not in cache:
            cache[key] = float(step_s(float(decodes), float(key[1] * GRAIN_TOKENS)))
        t += cache[key]
        ended = []
        for r in running:
            if r["first"]:
                r["decoded"] += 1
                if r["decoded"] >= osl - 1:
                    ended.append(r)
        for r, x in chunks:
            r["left"] -= x
            if r["left"] == 0:
                r["first"] = True
                ttfts.append(t - r["arrived"])
                if osl == 1:
                    ended.append(r)
        for r in ended:
            running.remove(r)
            done += 1
            waiting.append((t + CLIENT_S, r["client"]))
        waiting.sort()
    return ttfts


def main() -> int:
    rows, _ = read_rows(ROOT / "validation" / "nim-concurrency.csv")
    out = []
    for r in (r for r in rows if r.metric == "ttft_s"):
        inst = row_instance(dataclasses.replace(r, engine_max_tokens=None), r.batch_step)
        step = MixedStep(inst, inst.baseline())
        slots = max_batch(dataclasses.replace(r, concurrency=None, num_requests=None)).batch
        _, f = at_concurrency(r)
        fluid = f["ttft_s_model"] - f["step_in_flight_s"]  # approx.: the fluid queue differs slightly
        v = simulate(step, r.concurrency, r.isl, r.osl, r.engine_max_tokens or 10**9, slots)
        c = r.concurrency
        rec = {"id": r.id, "model": r.model, "isl": r.isl, "osl": r.osl, "concurrency": c, "slots": slots,
               "measured_s": r.value, "closed_loop_s": f["predicted"], "fluid_approx_s": fluid,
               "sim_first_round_s": statistics.mean(v[:c]), "sim_later_rounds_s": statistics.mean(v[c:]),
               "sim_all_s": statistics.mean(v)}
        out.append(rec)
        print(json.dumps(rec), flush=True)
    summary = {}
    for model in sorted({o["model"] for o in out}):
        sel = [o for o in out if o["model"] == model]
        summary[model] = {k: round(100 * statistics.mean(abs(o[k] / o["measured_s"] - 1) for o in sel), 2)
                          for k in ("closed_loop_s", "sim_first_round_s", "sim_later_rounds_s", "sim_all_s")}
    OUT.write_text(json.dumps({"what": __doc__.strip().splitlines()[0], "rounds": ROUNDS,
                               "mape_pct_by_model": summary, "rows": out}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
