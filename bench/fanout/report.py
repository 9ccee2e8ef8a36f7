"""The fan-out benchmark's report: the table it prints and the plot it draws from the results."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def print_table(r: dict[str, Any]) -> None:
    print(f"\nfan-out benchmark, ssekd beside the baseline bridge ({r['machine']['cpus']} cpus, "
          f"one server process each, {r.get('mode', '')})\n")
    rows = r.get("fanout", [])
    pairs: dict[tuple[int, float], dict[str, Any]] = {}
    for x in rows:
        pairs.setdefault((x["clients"], x["rate"]), {})[x["server"]] = x
    if pairs:
        print("every stream counted; latency over ~100 sampled streams (recv time - produce time)")
        print("| clients x ev/s | server | delivered/s | lost | dup | p50 ms | p99 ms | p999 ms "
              "| CPU us/event | KiB/stream | reader % | delivered ratio | p99 ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (clients, rate), by in pairs.items():
            s, b = by.get("ssekd"), by.get("baseline")
            for x in (s, b):
                if x is None:
                    continue
                ratios = ""
                if x is s and b is not None:
                    ratios = (f"{_ratio(s['delivered_per_s'], b['delivered_per_s'])} | "
                              f"{_ratio(s['p99_ms'], b['p99_ms'])}")
                else:
                    ratios = " | "
                print(f"| {clients:,} x {rate:.0f} | {x['server']} | {x['delivered_per_s']:,} | "
                      f"{x['lost']:,} | {x['duplicated']:,} | {x['p50_ms']} | {x['p99_ms']} | "
                      f"{x['p999_ms']} | {x['cpu_us_per_event']} | {x['kib_per_stream']} | "
                      f"{x['client_cpu_pct']} | {ratios} |")
    for i in r.get("idle", []):
        print(f"\nidle streams ({i['server']}): {i['streams']:,} held={i['held']}  "
              f"{i['kib_per_stream']} KiB RSS each (RSS {i['rss_before_mib']} -> "
              f"{i['rss_after_mib']} MiB), idle cpu {i['idle_cpu_pct']}%")
    if "single_client" in r:
        s = r["single_client"]
        print(f"\none client, {s['messages']:,} records: bare consumer "
              f"{s['bare_consumer_per_s']:,}/s (before {s['bare_cold_per_s']:,}, after "
              f"{s['bare_again_per_s']:,}); load {s['load_avg']}")
        for name in ("ssekd", "baseline"):
            if name in s:
                x = s[name]
                print(f"  {name:>8}: cold {x['cold_per_s']:,}/s ({x['ratio_cold']:.0%}, got "
                      f"{x['cold_got']:,}, server {x['cold_daemon_cpu_pct']}% cpu), cached "
                      f"{x['cached_per_s']:,}/s ({x['ratio_cached']:.0%}, got "
                      f"{x['cached_got']:,}, server {x['cached_daemon_cpu_pct']}% cpu)")
    for x in r.get("connection_storm", []):
        print(f"\nconnection storm ({x['server']}): {x['opened']:,}/{x['attempted']:,} streams "
              f"opened, {x['connects_per_s']:,} connects/s, {x['cpu_ms_per_connect']} ms CPU "
              f"each; first error: {x['first_error'] or 'none'}")
    for x in r.get("resume_storm", []):
        print(f"\nresume storm ({x['server']}): {x['clients']:,} streams resuming at once, "
              f"{x['events_each']:,} events each in {x['seconds']} s, complete "
              f"{x['complete']:,}, lost {x['lost']:,}, dup {x['duplicated']:,}, "
              f"{x['cpu_us_per_event']} us CPU/event")
    if "scrape_overhead" in r:
        s = r["scrape_overhead"]
        print(f"\nscraping /metrics every 100 ms, {s['clients']:,} x {s['rate']:.0f}/s: "
              f"delivered {s['delivered_per_s_without']:,}/s without, "
              f"{s['delivered_per_s_with']:,}/s with ({s['throughput_cost_pct']}% cost); "
              f"daemon CPU {s['cpu_ms_per_1000_without']} -> {s['cpu_ms_per_1000_with']} ms per "
              f"1,000 deliveries ({s['cpu_cost_pct']}%); every stream complete: {s['complete']}")


def plot(r: dict[str, Any], path: Path) -> None:
    """Delivered events/s and p99 per scenario (client count x rate), ssekd beside the
    baseline, as grouped bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = r["fanout"]
    labels = list(dict.fromkeys(f"{x['clients']:,}x{x['rate']:.0f}" for x in rows))
    names = list(dict.fromkeys(x["server"] for x in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / len(names)
    for k, (key, title) in enumerate((("delivered_per_s", "delivered events/s"),
                                      ("p99_ms", "p99 latency, ms (produce -> receive)"))):
        ax = axes[k]
        for j, name in enumerate(names):
            by = {f"{x['clients']:,}x{x['rate']:.0f}": x[key] for x in rows
                  if x["server"] == name}
            ax.bar([i + j * width for i in range(len(labels))],
                   [by.get(lab, 0) for lab in labels], width, label=name)
        ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(labels))], labels,
                      rotation=30)
        ax.set_xlabel("clients x events/s per client")
        ax.set_title(title)
        if key == "p99_ms":
            ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot written to {path}")
