"""Renders the raw results of bench/harness.py as the Markdown report: machine line,
pinning, one table per case, the targets (met / not met with the numbers) and the
hot-path timings. `python3 bench/report.py RESULTS.json` re-renders a saved run."""

import json
import sys

# Which direct run a target's added latency is measured against: the mock spoken to
# directly in the dialect the client speaks.
BASELINE = {
    "glider-openai": "direct-openai",
    "litellm-openai": "direct-openai",
    "glider-anthropic": "direct-anthropic",
    "glider-anthropic-openai": "direct-anthropic",
    "glider-anthropic-ollama": "direct-anthropic",
    "ccr-anthropic-openai": "direct-anthropic",
    "litellm-anthropic-openai": "direct-anthropic",
    "nginx-openai": "direct-openai",
    "nginx-anthropic": "direct-anthropic",
    "nginx-responses": "direct-responses",
    "glider-responses": "direct-responses",
}

# The nginx case's rows, in order (bench/harness.py runs them so): per front dialect, the
# direct run, nginx and Glider's same-dialect path, then Glider's translated paths.
NGINX_ROWS = ["direct-openai", "nginx-openai", "glider-openai",
              "direct-anthropic", "nginx-anthropic", "glider-anthropic",
              "direct-responses", "nginx-responses", "glider-responses",
              "glider-anthropic-openai", "glider-anthropic-ollama"]

# The nginx row each Glider row of the nginx case is compared with (issue 20).
NGINX_PEER = {
    "glider-openai": "nginx-openai",
    "glider-anthropic": "nginx-anthropic",
    "glider-responses": "nginx-responses",
    "glider-anthropic-openai": "nginx-anthropic",
    "glider-anthropic-ollama": "nginx-anthropic",
}

MB = 1e6


def mb(kib):
    return "—" if kib is None else f"{kib * 1024 / MB:.1f}"


def ms(us):
    return "—" if us is None else f"{us / 1000:.2f}"


def delta(us):
    return "—" if us is None else f"{us:+,.0f}"


def ok(flag):
    return "**met**" if flag else "**not met**"


def failed(r):
    return r is None or "failed" in r or "not_measured" in r


def pct(r, key, p):
    if failed(r):
        return None
    block = r.get(key) or {}
    return block.get(p)


def errors(r):
    if failed(r):
        return "—"
    return str(r.get("error_count", r.get("errors", 0)))


def label(res, name):
    return name


def latency_table(res, case, names, sizes=("small", "large"), conns=(1, 10)):
    out = []
    for size in sizes:
        for c in conns:
            out.append(f"\n**{size} body, {c} connection{'s' if c > 1 else ''}** "
                       "(latency in ms; added = this target's percentile minus the direct "
                       "run's, in µs)\n")
            out.append("| target | p50 | p90 | p99 | req/s | errors | added p50 µs | added p99 µs |")
            out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
            for name in names:
                r = res[case].get(f"{name}|{size}|{c}")
                if r is None:
                    continue
                if failed(r):
                    out.append(f"| {name} | failed: {r.get('failed', '')[:120]} | | | | | | |")
                    continue
                base = res[case].get(f"{BASELINE.get(name, '')}|{size}|{c}") or res["a"].get(
                    f"{BASELINE.get(name, '')}|{size}|{c}")
                d50 = d99 = None
                if name in BASELINE and not failed(base):
                    d50 = r["latency_us"]["p50"] - base["latency_us"]["p50"]
                    d99 = r["latency_us"]["p99"] - base["latency_us"]["p99"]
                lat = r["latency_us"]
                out.append(f"| {name} | {ms(lat['p50'])} | {ms(lat['p90'])} | {ms(lat['p99'])} | "
                           f"{r['rps']:,.0f} | {errors(r)} | {delta(d50)} | {delta(d99)} |")
    return "\n".join(out)


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def paired_ratio(off, on, key):
    """The median over rounds of on/off for a saturation run's `key`, within each round:
    a round's variants run back to back, so a drift of the shared machine between
    rounds cancels out of each ratio (it does not out of a ratio of medians)."""
    ratios = [b[key] / a[key] for a, b in zip(off["saturation"], on["saturation"])
              if a.get(key) and key in b]
    return median(ratios)


def paired_cost(off, on):
    """The throughput cost, as the median of each round's own 1 - on/off."""
    middle = paired_ratio(off, on, "rps")
    return None if middle is None else (1 - middle) * 100


def context_section(res):
    """Context on vs off: the medians over the rounds, each round's numbers, and the
    issue's targets (under 5 % of throughput, under 20 µs p50, zero gaps)."""
    ctx = res.get("context") or {}
    if not ctx:
        return []
    body = {"small": "small body", "large": "large body, shaped like a Claude Code turn"}.get(
        res.get("context_body", "small"), res.get("context_body"))
    backend = {"bench-chat": "to a local vLLM backend", "gpt-4.1": "to a cloud OpenAI backend"}.get(
        res.get("context_model", "bench-chat"), f"model {res.get('context_model')}")
    L = [f"\n## Context on vs off (OpenAI Chat, same dialect, {backend}; {body}; "
         f"p50 at 1 connection, saturation at {res.get('sat_conns', 32)} connections)\n"]
    L.append("| variant | config | p50 µs (1 conn) | req/s (saturation) | CPU µs a request (saturation) | events written/s | dropped | gaps | compactions | rounds |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for name, v in ctx.items():
        if failed(v):
            L.append(f"| {name} | failed: {str(v.get('failed'))[:160]} | | | | | | | | |")
            continue
        p50 = median([r["latency_us"]["p50"] for r in v["latency"]])
        rps = median([r["rps"] for r in v["saturation"]])
        cpu = median([r["cpu_us_per_request"] for r in v["saturation"] if "cpu_us_per_request" in r])
        eps = median([r["events_per_s"] for r in v["saturation"]])
        dropped = sum(r["context"]["glider_context_events_dropped_total"] for r in v["saturation"])
        gaps = sum(r["context"]["glider_context_gaps_total"] for r in v["saturation"])
        compactions = sum(r["context"]["compactions"] for r in v["saturation"])
        summary[name] = {"p50": p50, "rps": rps, "cpu": cpu, "gaps": gaps, "dropped": dropped}
        fmt = lambda x, f: "—" if x is None else format(x, f)  # noqa: E731
        L.append(f"| {name} | `{v['config']}` | {fmt(p50, ',.0f')} | {fmt(rps, ',.0f')} | {fmt(cpu, ',.1f')} | "
                 f"{fmt(eps, ',.0f')} | {dropped:.0f} | {gaps:.0f} | {compactions:.0f} | {len(v['saturation'])} |")
        if v.get("failures"):
            L.append(f"| {name} | failed runs: {'; '.join(f[:100] for f in v['failures'])} | | | | | | | | |")
    L.append("\nEach round, per variant: p50 µs at 1 connection / req/s at saturation / CPU µs a "
             "request at saturation:\n")
    for name, v in ctx.items():
        if failed(v):
            continue
        rows = [f"{r['latency_us']['p50']} / {s['rps']:,.0f} / "
                + (f"{s['cpu_us_per_request']:.1f}" if "cpu_us_per_request" in s else "—")
                for r, s in zip(v["latency"], v["saturation"])]
        L.append(f"- {name}: {', '.join(rows)}")
    off = summary.get("off")
    if off and off["p50"] is not None and off["rps"]:
        L.append("\nTargets (issue 14), each \"on\" variant against \"off\":\n")
        for name in ("on", "on+summarizer"):
            on = summary.get(name)
            if not on or on["p50"] is None or not on["rps"]:
                continue
            added = on["p50"] - off["p50"]
            cost = (1 - on["rps"] / off["rps"]) * 100
            paired = paired_cost(ctx["off"], ctx[name])
            both = cost if paired is None else max(cost, paired)
            shown = "" if paired is None else f", {paired:+.1f} % as the median of each round's own ratio"
            L.append(f"- {name}: added p50 {added:+,.0f} µs (target under 20 µs: {ok(added < 20)}); "
                     f"throughput cost {cost:+.1f} % from the medians{shown} "
                     f"(target under 5 %, by both: {ok(both < 5)}); "
                     f"gaps {on['gaps']:.0f}, dropped {on['dropped']:.0f} (target zero: {ok(on['gaps'] == 0)})")
            cpu_cost = cpu_cost_of(ctx["off"], ctx[name])
            if cpu_cost is not None:
                L.append(f"  - by the proxy's CPU a request at saturation (its one core's capacity, "
                         f"whatever share of the other core the load generator got): "
                         f"{cpu_cost:+.1f} % more CPU, the median of each round's own ratio")
    return L


def cpu_cost_of(off, on):
    """On's CPU a request over off's, as a percentage more: the median of each round's."""
    middle = paired_ratio(off, on, "cpu_us_per_request")
    return None if middle is None else (middle - 1) * 100


def render(res):
    m = res["machine"]
    L = []
    L.append(f"# Glider benchmark — {m.get('glider', '?')}\n")
    L.append(f"Machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}; "
             f"load average {' '.join(m['loadavg_start'])} at start, "
             f"{' '.join(m.get('loadavg_end', ['?']))} at end (the cores are shared with other work).  ")
    L.append(f"Versions: Glider {m['glider']} ({m['rustc']}), LiteLLM {m['litellm']}, "
             f"claude-code-router {m['claude-code-router']}, mitmproxy {m['mitmproxy']}, "
             f"{m['wrk']}, {m['python']}, Node {m['node']}.  ")
    L.append(f"Each measured run: {res['seconds']} s after a {res['warmup']} s warm-up; "
             f"whole run {res.get('wall_s', '?')} s.\n")
    p = res["pinning"]
    if p["enabled"]:
        L.append(f"Pinning (`taskset`): mock upstream on core {p['mock']}, the proxy under test on "
                 f"core {p['proxy']}, the load generator (wrk / glider-load) on core {p['load']}, "
                 "sharing it with the mock. Every proxy runs all the time on the same core; only "
                 "one is loaded at a time. A direct run leaves the proxy core idle.\n")
    else:
        L.append("Pinning: off (fewer than 2 cores).\n")

    if res.get("cases") == ["context"]:
        L.extend(context_section(res))
        return "\n".join(L) + "\n"

    L.append("## Targets\n")
    L.append("| target | what it is |")
    L.append("|---|---|")
    for name, t in res["targets"].items():
        L.append(f"| {name} | {t.get('label', '')}{' — **failed**: ' + t['failed'][:200] if 'failed' in t else ''} |")

    L.extend(nginx_section(res))

    L.append("\n## (a) Non-streaming latency (wrk, closed loop)\n")
    L.append(latency_table(res, "a", ["direct-openai", "glider-openai", "litellm-openai",
                                      "direct-anthropic", "glider-anthropic",
                                      "glider-anthropic-openai", "ccr-anthropic-openai"]))

    L.append(f"\n\n## (b) Throughput at saturation (small body, {res.get('sat_conns', 32)} connections)\n")
    L.append("| target | req/s | p50 ms | p99 ms | errors | vs its direct | Glider (same work) ÷ this |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    b = res["b"]
    same_work = {"litellm-openai": "glider-openai", "ccr-anthropic-openai": "glider-anthropic-openai"}
    for name, r in b.items():
        if failed(r):
            L.append(f"| {name} | failed: {str(r.get('failed'))[:120]} | | | | | |")
            continue
        base = b.get(BASELINE.get(name, ""))
        share = r["rps"] / base["rps"] * 100 if not failed(base) and base["rps"] else None
        vs = "—" if share is None else (f"{share:.0f} %" if share >= 10 else f"{share:.1f} %")
        g = b.get(same_work.get(name, ""))
        ratio = f"{g['rps'] / r['rps']:.1f}×" if not failed(g) and r["rps"] else "—"
        L.append(f"| {name} | {r['rps']:,.0f} | {ms(r['latency_us']['p50'])} | "
                 f"{ms(r['latency_us']['p99'])} | {errors(r)} | {vs} | {ratio} |")

    L.append("\n## (c) Streaming: time to first and last byte (glider-load, 1 connection, 20 deltas, "
             f"{max(3, res['seconds'] // 2)} s per run)\n")
    L.append("| target | body | TTFB p50 ms | TTFB p99 ms | TTLB p50 ms | TTLB p99 ms | added TTFB p50 µs | added TTFB p99 µs | errors |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    c = res["c"]
    for key, r in c.items():
        name, size = key.split("|")
        if failed(r):
            L.append(f"| {name} | {size} | failed: {str(r.get('failed'))[:120]} | | | | | | |")
            continue
        base = c.get(f"{BASELINE.get(name, '')}|{size}")
        d50 = d99 = None
        if name in BASELINE and not failed(base):
            d50 = r["ttfb_us"]["p50"] - base["ttfb_us"]["p50"]
            d99 = r["ttfb_us"]["p99"] - base["ttfb_us"]["p99"]
        L.append(f"| {name} | {size} | {ms(r['ttfb_us']['p50'])} | {ms(r['ttfb_us']['p99'])} | "
                 f"{ms(r['latency_us']['p50'])} | {ms(r['latency_us']['p99'])} | {delta(d50)} | "
                 f"{delta(d99)} | {r['errors']} |")

    L.append("\n## (d) Memory (VmRSS summed over each proxy's process group, MB = 10⁶ bytes)\n")
    L.append("| proxy | processes | idle | peak under cases a–c, e, f | VmHWM at end | "
             f"peak under {res.get('streams', 1000)} concurrent streams | streams/s | errors |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    d = res["d"]
    for name in ("glider", "litellm", "ccr"):
        r = d.get(name)
        if r is None:
            continue
        s = d.get(f"{name}|streams")
        sp = "—" if failed(s) else mb(s.get("peak_rss_kib"))
        srate = "—" if failed(s) else (f"{s['rps']:,.0f}" if s["requests"] else
                                        f"none completed in {s['duration_s']:.0f} s")
        serr = "—" if failed(s) else errors(s)
        if s is not None and failed(s):
            sp = "failed: " + str(s.get("failed"))[:80]
        L.append(f"| {name} | {r['processes']} | {mb(r['idle_rss_kib'])} | {mb(r['peak_rss_load_kib'])} | "
                 f"{mb(r['hwm_kib'])} | {sp} | {srate} | {serr} |")
    mm = res["e"].get("mitmproxy-memory")
    if mm:
        L.append(f"| mitmdump | 1 | {mb(mm['idle_rss_kib'])} | {mb(mm['peak_rss_load_kib'])} | "
                 f"{mb(mm['hwm_kib'])} | — | — | — |")

    L.append("\n## (e) MITM: decrypted path and raw tunnel (glider-load, small Anthropic body)\n")
    L.append("| path | connections | req/s | p50 ms | p99 ms | errors | reply from the mock |")
    L.append("|---|---:|---:|---:|---:|---:|---|")
    e = res["e"]
    for key, r in e.items():
        if "|" not in key:
            continue
        name, conns = key.split("|")
        if failed(r) or not r.get("latency_us"):
            why = r.get("failed") or r.get("first_error")
            L.append(f"| {name} | {conns} | failed: {str(why)[:120]} | | | | |")
            continue
        L.append(f"| {name} | {conns} | {r['rps']:,.0f} | {ms(r['latency_us']['p50'])} | "
                 f"{ms(r['latency_us']['p99'])} | {r['errors']} | {r.get('expected_reply')} |")
    if any(k.startswith("glider-decrypted") for k in e):
        L.append("\nGlider's decrypted row is its local path (decrypt, route, translate to the "
                 "local OpenAI-Chat backend and back); mitmproxy's decrypts and forwards. The "
                 "tunnel rows are the same work for both: CONNECT, then raw bytes.")
    ge = e.get("glider", {})
    if "not_measured" in ge:
        L.append(f"\nGlider MITM: **not yet measured: {ge['not_measured']}**. The harness slot is "
                 "in place: when `glider serve` listens on `mitm.port` and writes its CA to "
                 "`mitm.ca_dir/ca.crt`, the same client measures it the same way.")

    L.append("\n## (f) Cross-dialect: Anthropic front → another backend dialect\n")
    L.append("Glider decodes the Anthropic request into its own message format and encodes it for "
             "Ollama `/api/chat` (or OpenAI Chat), then translates the reply back; "
             "claude-code-router (`@musistudio/llms` transformers) does Anthropic → OpenAI Chat "
             "and back; LiteLLM's `/v1/messages` does Anthropic → its OpenAI provider. "
             "`direct-ollama` is the mock's Ollama endpoint spoken to directly (its own dialect); "
             "added latency is against `direct-anthropic`.\n")
    L.append(latency_table(res, "f", ["direct-ollama", "glider-anthropic-ollama",
                                      "glider-anthropic-openai", "ccr-anthropic-openai",
                                      "litellm-anthropic-openai"]))

    L.append("\n\n## Targets (met / not met)\n")
    L.extend(targets(res))

    hp = res.get("hotpath")
    if hp and not failed(hp):
        L.append(f"\n## Glider's own hot path, in-process (glider-hotpath, {hp['iterations']} iterations)\n")
        L.append("Times per call; × parse is the median against a plain `serde_json::from_slice::<Value>` "
                 "of the same bytes.\n")
        L.append("| body | dialect | operation | p50 µs | p99 µs | × parse |")
        L.append("|---|---|---|---:|---:|---:|")
        for row in hp["rows"]:
            if row["size"] == "small" and not row["op"].startswith(("prepare", "serde", "decode")):
                continue
            L.append(f"| {row['size']} ({row['bytes']:,} B) | {row['dialect']} | {row['op']} | "
                     f"{row['p50_us']} | {row['p99_us']} | {row['x_parse']} |")
    elif hp:
        L.append(f"\n## Glider's own hot path\n\nfailed: {hp.get('failed')}")
    L.extend(context_section(res))
    L.extend(plugins_section(res))
    L.extend(hedge_section(res))
    return "\n".join(L) + "\n"


def plugins_section(res):
    """glider-plugins: each hook's added latency at c1 and throughput ratio at c50."""
    pl = res.get("plugins")
    if not pl:
        return []
    if failed(pl):
        return [f"\n## Plugin hooks\n\nfailed: {pl.get('failed')}"]
    out = [f"\n## Plugin hooks (glider-plugins, {pl['seconds_per_point']:g} s per point)\n",
           f"The last of {pl.get('rounds', 1)} interleaved rounds; the added figures below are "
           "medians over the rounds of each hook's difference to its round's no-plugin case.\n",
           "| case | c1 p50 µs | c1 p99 µs | c1 errors | c{0} req/s | c{0} errors |".format(pl["connections"]),
           "|---|---:|---:|---:|---:|---:|"]
    for case in pl["cases"]:
        one, many = case["points"]
        out.append(f"| {case['case']} | {one['latency_us']['p50']} | {one['latency_us']['p99']} | "
                   f"{one['errors']} | {many['rps']} | {many['errors']} |")
    out.append("\n| hook | added p50 µs (c1) | added p99 µs (c1) | throughput vs none (c{}) |".format(pl["connections"]))
    out.append("|---|---:|---:|---:|")
    for row in pl["versus_none"]:
        out.append(f"| {row['case']} | {row['added_p50_us_c1']} | {row['added_p99_us_c1']} | "
                   f"{row['throughput_ratio_cN']} |")
    return out


def hedge_section(res):
    """glider-hedge: time to first byte and upstream requests per fan_out case."""
    hd = res.get("hedge")
    if not hd:
        return []
    if failed(hd):
        return [f"\n## Hedging a slow local model\n\nfailed: {hd.get('failed')}"]
    script = hd["local_ttft_script_ms"]
    out = [f"\n## Hedging a slow local model (glider-hedge, cloud TTFT {hd['cloud_ttft_ms']} ms)\n",
           "| case | fan_out | p50 ms | p90 ms | p99 ms | max ms | upstream requests | extra | cloud answered |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|",
           f"| local script itself | — | {script['p50']} | {script['p90']} | {script['p99']} | {script['max']} | — | — | — |"]
    for case in hd["cases"]:
        t = case["ttft_ms"]
        out.append(f"| {case['case']} | `{case['fan_out']}` | {t['p50']} | {t['p90']} | {t['p99']} | {t['max']} | "
                   f"{case['upstream_requests']} | {case['extra_upstream_requests']} | {case['cloud_answered']} |")
    return out


def nginx_section(res):
    """The issue 20 table: nginx and Glider side by side (added p50 at 1 connection,
    req/s at the nginx case's connections with the small and the ~80 KB body, added
    streaming TTFB), each Glider figure also as a share of nginx's, then the targets."""
    n = res.get("n") or {}
    if not n:
        return []
    conns = res.get("nginx_conns", 50)
    L = [f"\n## (n) nginx vs Glider (issue 20; wrk closed loop; streams with glider-load)\n"]
    L.append(f"| target | added p50 ms, 1 conn | req/s, {conns} conns | 80 KB req/s, {conns} conns | "
             "added stream TTFB p50 ms |")
    L.append("|---|---:|---:|---:|---:|")

    def get(name, key):
        r = n.get(f"{name}|{key}")
        return None if failed(r) else r

    def added(name, key, block):
        r, base = get(name, key), get(BASELINE.get(name, ""), key)
        if r is None or base is None or not r.get(block) or not base.get(block):
            return None
        return r[block]["p50"] - base[block]["p50"]

    def rps(name, key):
        r = get(name, key)
        return None if r is None else r["rps"]

    def share(name, key):
        mine, peer = rps(name, key), rps(NGINX_PEER.get(name, ""), key)
        if mine is None or not peer:
            return ""
        return f" ({mine / peer * 100:.0f} %)"

    def cell(x, f):
        return "—" if x is None else format(x, f)

    seen = {k.split("|")[0] for k in n}
    for name in [row for row in NGINX_ROWS if row in seen]:
        if name.startswith("direct-"):
            small, large = rps(name, f"small|{conns}"), rps(name, f"large|{conns}")
            L.append(f"| {name} (baseline) | — | {cell(small, ',.0f')} | {cell(large, ',.0f')} | — |")
            continue
        a = added(name, "small|1", "latency_us")
        t = added(name, "stream", "ttfb_us")
        L.append(f"| {name} | {cell(None if a is None else a / 1000, '+.3f')} | "
                 f"{cell(rps(name, f'small|{conns}'), ',.0f')}{share(name, f'small|{conns}')} | "
                 f"{cell(rps(name, f'large|{conns}'), ',.0f')}{share(name, f'large|{conns}')} | "
                 f"{cell(None if t is None else t / 1000, '+.3f')} |")
    for key, r in n.items():
        if failed(r):
            L.append(f"\n- {key}: failed: {str(r.get('failed'))[:200]}")
    rounds = {key: r["rounds"] for key, r in n.items() if not failed(r) and len(r.get("rounds", [])) > 1}
    if rounds:
        L.append(f"\nEach figure is the median of {max(len(v) for v in rounds.values())} rounds (every "
                 "target once a round); every round's figure, lowest first (p50 / TTFB in µs, "
                 "throughput in req/s):\n")
        for key, values in rounds.items():
            L.append(f"- {key}: {', '.join(f'{v:,.0f}' for v in values)}")

    L.append("\nTargets (issue 20), Glider against nginx in this run:\n")

    def ratio_line(name, key, goal, what):
        mine, peer = rps(name, key), rps(NGINX_PEER[name], key)
        if mine is None or not peer:
            L.append(f"- {what}: not measured")
            return
        r = mine / peer
        L.append(f"- {what}: {r * 100:.0f} % ({mine:,.0f} vs {peer:,.0f} req/s) — {ok(r >= goal)}")

    for name in ("glider-openai", "glider-anthropic", "glider-responses"):
        ratio_line(name, f"small|{conns}", 0.5, f"{name}, small body, {conns} conns ≥ 50 % of nginx")
        ratio_line(name, f"large|{conns}", 0.5, f"{name}, 80 KB body, {conns} conns ≥ 50 % of nginx")
    for name in ("glider-anthropic-openai", "glider-anthropic-ollama"):
        ratio_line(name, f"small|{conns}", 0.35, f"{name} (translated), small body ≥ 35 % of nginx")
        ratio_line(name, f"large|{conns}", 0.25, f"{name} (translated), 80 KB body ≥ 25 % of nginx")
    for name in ("glider-openai", "glider-anthropic", "glider-responses"):
        peer = NGINX_PEER[name]
        for key, block, slack, what in (("small|1", "latency_us", 60, "added p50 at 1 conn"),
                                        ("stream", "ttfb_us", 100, "added stream TTFB p50")):
            mine, theirs = added(name, key, block), added(peer, key, block)
            if mine is None or theirs is None:
                L.append(f"- {name}, {what} ≤ nginx's + {slack} µs: not measured")
                continue
            L.append(f"- {name}, {what} ≤ nginx's + {slack} µs: {mine:+,.0f} µs vs nginx {theirs:+,.0f} µs "
                     f"— {ok(mine <= theirs + slack)}")
    return L


def targets(res):
    out = []
    a, c = res["a"], res["c"]

    def added(case, name, key_suffix, block):
        r = case.get(f"{name}|{key_suffix}")
        base = case.get(f"{BASELINE[name]}|{key_suffix}")
        if failed(r) or failed(base):
            return None
        return (r[block]["p50"] - base[block]["p50"], r[block]["p99"] - base[block]["p99"])

    out.append("Added latency over direct — target p50 ≤ 100 µs, p99 ≤ 300 µs:\n")
    out.append("| Glider path | body | connections | added p50 µs | added p99 µs | verdict |")
    out.append("|---|---|---:|---:|---:|---|")
    for name in ("glider-openai", "glider-anthropic", "glider-anthropic-openai", "glider-anthropic-ollama"):
        for size in ("small", "large"):
            for conns in (1, 10):
                case = a if name in ("glider-openai", "glider-anthropic", "glider-anthropic-openai") else res["f"]
                v = added(case, name, f"{size}|{conns}", "latency_us")
                if v:
                    out.append(f"| {name} (non-streaming) | {size} | {conns} | {v[0]:+,} | {v[1]:+,} | "
                               f"{ok(v[0] <= 100 and v[1] <= 300)} |")
    for name in ("glider-openai", "glider-anthropic", "glider-anthropic-openai", "glider-anthropic-ollama"):
        for size in ("small", "large"):
            v = added(c, name, size, "ttfb_us")
            if v:
                out.append(f"| {name} (streaming TTFB) | {size} | 1 | {v[0]:+,} | {v[1]:+,} | "
                           f"{ok(v[0] <= 100 and v[1] <= 300)} |")

    b = res["b"]
    out.append("\nThroughput (small body, saturation):\n")

    def ratio(x, y):
        if failed(b.get(x)) or failed(b.get(y)) or not b[y]["rps"]:
            return None
        return b[x]["rps"] / b[y]["rps"]

    for x, y, goal, what in (
        ("glider-openai", "litellm-openai", 10, "≥ 10× LiteLLM (both OpenAI Chat → OpenAI-compatible backend)"),
        ("glider-anthropic-openai", "ccr-anthropic-openai", 3,
         "≥ 3× claude-code-router (both translate Anthropic → OpenAI Chat)"),
        ("glider-openai", "ccr-anthropic-openai", 3,
         "≥ 3× claude-code-router (Glider's same-dialect path vs CCR's only path)"),
        ("glider-openai", "direct-openai", 0.7, "≥ 70 % of direct (OpenAI Chat)"),
        ("glider-anthropic", "direct-anthropic", 0.7, "≥ 70 % of direct (Anthropic)"),
    ):
        r = ratio(x, y)
        if r is None:
            out.append(f"- {what}: not measured ({x} or {y} missing)")
        else:
            shown = f"{r * 100:.0f} %" if goal < 1 else f"{r:.1f}×"
            out.append(f"- {what}: {shown} ({b[x]['rps']:,.0f} vs {b[y]['rps']:,.0f} req/s) — {ok(r >= goal)}")

    d = res["d"].get("glider")
    out.append("\nMemory:\n")
    if d:
        idle = d["idle_rss_kib"] * 1024 / MB if d.get("idle_rss_kib") else None
        # Issue 20's targets: idle ≤ 20 MB, 1,000 concurrent streams ≤ 100 MB.
        out.append(f"- idle ≤ 20 MB: {idle:.1f} MB — {ok(idle <= 20)}" if idle else "- idle: not measured")
    s = res["d"].get("glider|streams")
    if s and not failed(s):
        peak = s["peak_rss_kib"] * 1024 / MB
        n = res.get("streams", 1000)
        out.append(f"- ≤ 100 MB under {n} concurrent streams: {peak:.1f} MB peak "
                   f"({s['rps']:,.0f} streams/s, {errors(s)} errors) — {ok(peak <= 100 and s['error_count'] == 0)}")
    else:
        out.append("- under concurrent streams: " + ("not measured (a run failed)" if "d" in res.get("cases", "d")
                                                     else "not run (case d not in BENCH_CASES)"))

    e = res["e"]
    out.append("\nMITM:\n")
    ge = e.get("glider", {})
    if "not_measured" in ge:
        out.append(f"- decrypted path ≥ 3× mitmproxy: not yet measured: {ge['not_measured']}")
    else:
        g, mp = e.get("glider-decrypted|10"), e.get("mitmproxy-decrypted|10")
        if "e" not in res.get("cases", "e"):
            out.append("- decrypted path ≥ 3× mitmproxy: not run (case e not in BENCH_CASES)")
        elif failed(g) or failed(mp):
            out.append("- decrypted path ≥ 3× mitmproxy: not measured (a run failed)")
        else:
            r = g["rps"] / mp["rps"]
            out.append(f"- decrypted path ≥ 3× mitmproxy: {r:.1f}× ({g['rps']:,.0f} vs {mp['rps']:,.0f} req/s) — {ok(r >= 3)}")

    out.append("\nRoute decision (token estimate + `glider_engine::router::route`, in-process):\n")
    hp = res.get("hotpath")
    if hp and not failed(hp):
        rows = [r for r in hp["rows"] if r["op"] == "route decision (estimate + route)" and r["size"] == "large"]
        worst = max(rows, key=lambda r: r["p99_us"]) if rows else None
        if worst:
            out.append(f"- ≤ 50 µs p99 over the ~80 KB body: worst dialect {worst['dialect']} p99 "
                       f"{worst['p99_us']} µs (p50 {worst['p50_us']} µs) — {ok(worst['p99_us'] <= 50)}. "
                       "No Starlark rules exist yet (the rule engine is being rebuilt); this is "
                       "the current model router.")
        tk = [r for r in hp["rows"] if r["op"].startswith("token estimate, tiktoken") and r["size"] == "large"]
        if tk:
            w = max(tk, key=lambda r: r["p99_us"])
            out.append(f"- for OpenAI model names the estimate is tiktoken: p50 {w['p50_us']} µs, "
                       f"p99 {w['p99_us']} µs over the same body ({w['dialect']}).")
    else:
        out.append("- not measured")
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(render(json.load(f)))
