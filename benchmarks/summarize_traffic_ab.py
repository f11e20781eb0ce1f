"""The traffic term's A/B (bench_optimize.py --ab-traffic) as a markdown table: per case, the final
interleaved medians of round-up-to-8, lossless with the traffic term and lossless with the conv
table alone, and the slope each traffic-priced run fitted (records of --ab-traffic-trim get a second
table, trim against trim); SMs is the green context's count ("full":
the whole GPU). Records of 300 KB or more are committed as NAME.json.gz (benchmarks/results/README.md),
hence the glob's last `*`:

  python benchmarks/summarize_traffic_ab.py benchmarks/results/h200_traffic/optimize_*.json*
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from deployopt.fileio import json_name, read_json


def _fit(tr: dict[str, Any]) -> str:
    """The slope a traffic-priced run fitted, as priced, or why it priced none."""
    fitted = tr.get("fitted_us_per_mb")
    if tr.get("used") and fitted is not None:
        return f"{fitted:.2f} ± {tr['stderr_us_per_mb']:.2f} (priced {tr['us_per_mb']:.2f})"
    return tr.get("why", "—")


def _ab_rows(path: Path, mode: str) -> list[str]:
    """One row per case that timed `mode` (lossless or trim) with the traffic term and with the conv
    table alone: both against round-up-to-8, and the term's answer against the other's; lossless
    rows end with the slope its traffic-priced run fitted."""
    data = read_json(path)
    out = []
    sms = data.get("sms")
    verdict_key = "traffic_ab" if mode == "lossless" else f"traffic_ab_{mode}"
    for cid, case in data["cases"].items():
        final = case["final"]
        if f"deployopt_{mode}_conv_only" not in final:
            continue
        r8 = final["round_up_8"]["median_us"]
        priced = final[f"deployopt_{mode}"]["median_us"]
        conv = final[f"deployopt_{mode}_conv_only"]["median_us"]
        fit = f" {_fit(case['lossless'].get('traffic') or {})} |" if mode == "lossless" else ""
        out.append(
            f"| {json_name(path)} | {cid} | {sms or 'full'} | {r8:.1f} | "
            f"{priced:.1f} ({100 * (priced / r8 - 1):+.1f} %) | "
            f"{conv:.1f} ({100 * (conv / r8 - 1):+.1f} %) | {100 * (priced / conv - 1):+.1f} % "
            f"({case.get(verdict_key, {}).get('verdict', '—')}) |{fit}"
        )
    return out


def rows(path: Path) -> list[str]:
    """Lossless with the traffic term against lossless with the conv table alone (--ab-traffic)."""
    return _ab_rows(path, "lossless")


def trim_rows(path: Path) -> list[str]:
    """Trim against trim, the same way (--ab-traffic-trim records)."""
    return _ab_rows(path, "trim")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print(
        "| file | case | SMs | round-up-to-8 µs | lossless, traffic term | lossless, conv table alone "
        "| term vs alone | fitted µs/MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for p in argv:
        for row in rows(Path(p)):
            print(row)
    trims = [row for p in argv for row in trim_rows(Path(p))]
    if trims:  # records of --ab-traffic-trim
        print(
            "\n| file | case | SMs | round-up-to-8 µs | trim, traffic term | trim, conv table alone "
            "| term vs alone |"
        )
        print("|---|---|---|---|---|---|---|")
        print("\n".join(trims))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
