"""Reads the JSON lines of cohort_allreduce_bench and gloo_bench.py on stdin; prints the table
(time, algbw, busbw per size for cohort and gloo, their ratio, the memcpy ceiling) and one JSON
line with every figure and the verdict on the targets: cohort busbw >= 3x gloo's from 1 MiB up,
and at the largest size >= half the memcpy ceiling."""
import json
import sys


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:g} {unit}"
        n /= 1024
    return str(n)


def main():
    rows = {}
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rows.setdefault(r["bytes"], {})[r["impl"]] = r
    sizes = sorted(rows)
    print(f"{'size':>9} | {'cohort us':>10} {'algbw':>7} {'busbw':>7} | {'gloo us':>10} "
          f"{'busbw':>7} | {'ratio':>6} | {'memcpy':>7}")
    print("-" * 84)
    table = []
    for s in sizes:
        c, g, m = rows[s].get("cohort"), rows[s].get("gloo"), rows[s].get("memcpy")
        ratio = (c["busbw_GBps"] / g["busbw_GBps"]) if c and g and g["busbw_GBps"] else None
        print(f"{human(s):>9} | "
              + (f"{c['time_us']:>10.1f} {c['algbw_GBps']:>7.2f} {c['busbw_GBps']:>7.2f}"
                 if c else f"{'-':>10} {'-':>7} {'-':>7}")
              + " | "
              + (f"{g['time_us']:>10.1f} {g['busbw_GBps']:>7.2f}" if g else f"{'-':>10} {'-':>7}")
              + " | " + (f"{ratio:>5.1f}x" if ratio else f"{'-':>6}")
              + " | " + (f"{m['GBps']:>7.2f}" if m else f"{'-':>7}"))
        table.append({"bytes": s,
                      "cohort_time_us": c and c["time_us"],
                      "cohort_algbw_GBps": c and c["algbw_GBps"],
                      "cohort_busbw_GBps": c and c["busbw_GBps"],
                      "gloo_time_us": g and g["time_us"],
                      "gloo_busbw_GBps": g and g["busbw_GBps"],
                      "ratio": ratio and round(ratio, 2),
                      "memcpy_GBps": m and m["GBps"]})
    big = table[-1] if table else {}
    ceiling = big.get("memcpy_GBps")
    ratios_ok = all(t["ratio"] is not None and t["ratio"] >= 3
                    for t in table if t["bytes"] >= (1 << 20))
    half_ok = bool(ceiling and big.get("cohort_busbw_GBps")
                   and big["cohort_busbw_GBps"] >= 0.5 * ceiling)
    print("-" * 84)
    print(f"memcpy ceiling at {human(big.get('bytes', 0))}: {ceiling} GB/s; "
          f"target >=3x gloo from 1 MiB: {'met' if ratios_ok else 'NOT met'}; "
          f"target >=0.5 ceiling at the largest size: {'met' if half_ok else 'NOT met'}")
    print(json.dumps({"bench": "allreduce", "ranks": 2, "dtype": "float32", "op": "sum",
                      "memcpy_ceiling_GBps": ceiling, "target_3x_gloo_from_1MiB": ratios_ok,
                      "target_half_ceiling_at_max": half_ok, "sizes": table}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
