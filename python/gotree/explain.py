"""What a gotree group runs and why, as text (gotree.describe, printed by rank 0).

    torchrun --nproc-per-node 4 -m gotree.explain [--sizes 4,4K,64K,1M,4M,64M] [--tune]
    python -m gotree.explain --file DUMP.json   # what GOTREE_GRAPH_DUMP_FILE wrote

Prints the ranks, nodes and settings, every channel's ring and tree with each rank's
role, and per collective and size the algorithm that runs, what decided it (the cost
model, or autotuning's measurements of the first calls of an allreduce size), the
model's time of every algorithm it may run there and autotuning's measured times.
--tune first issues allreduces of each size (float32, checked) until autotuning has
decided, so that the table shows what a training loop would run after its first
calls. `gotree explain` (the CLI) says the same for a machine you describe, with no
ranks running.
"""

import argparse
import sys

from gotree.bench import AUTOTUNE_CALLS, exploring
from gotree.bench import human as _fmt_bytes
from gotree.bench import parse_size


def _tune(sizes, rank, n):
    """Allreduces of each size until autotuning decided it (every rank sees the
    decision at the same call); returns the number of wrong results."""
    import torch
    import torch.distributed as dist

    wrong = 0
    for b in sizes:
        t = torch.empty(max(b // 4, 1), dtype=torch.float32)
        for _ in range(AUTOTUNE_CALLS + 1):
            t.fill_(rank + 1)
            dist.all_reduce(t)
            wrong += int((t != n * (n + 1) / 2).sum())
            if not exploring(None, 4 * t.numel()):
                break
    return wrong


def _tables(choices, where, out):
    """One table per collective: what runs at each size, and why."""
    by_coll = {}
    for c in choices:
        by_coll.setdefault(c["coll"], []).append(c)
    for coll, rows in by_coll.items():
        algos = sorted({a for r in rows for a in r["model_us"]})
        # Autotuning's candidates: algorithms, or "ring/2ch" and "ring/1ch"
        # where it measured one algorithm on two channel counts.
        tried = sorted({a for r in rows for a in r["measured_us"]})
        measured = bool(tried)
        width = {a: max(13, len("measured " + a)) for a in tried}
        print("\n{}{} (size as nccl-tests counts it)".format(coll, where), file=out)
        head = "{:>10}  {:>8}  {:>6}  {:>3}  {:>10}".format("size", "runs", "proto", "ch", "decided by")
        head += "".join("  {:>11}".format("model " + a) for a in algos)
        if measured:
            head += "".join("  {:>{}}".format("measured " + a, width[a]) for a in tried)
        print(head, file=out)
        for r in rows:
            line = "{:>10}  {:>8}  {:>6}  {:>3}  {:>10}".format(_fmt_bytes(r["bytes"]), r["algo"], r["proto"], r["channels"], r["by"])
            line += "".join("  {:>11}".format("{:.1f}".format(r["model_us"][a]) if a in r["model_us"] else "-") for a in algos)
            if measured:
                line += "".join("  {:>{}}".format("{:.1f}".format(r["measured_us"][a]) if a in r["measured_us"] else "-", width[a]) for a in tried)
            notes = []
            if r["in_place_algo"]:
                notes.append("in place: " + r["in_place_algo"])
            if r["model_cannot_predict"]:
                notes.append("model cannot predict " + ", ".join(r["model_cannot_predict"]))
            if r.get("left_out_above_size"):
                notes.append("auto leaves out " + ", ".join(r["left_out_above_size"]) + " at this size")
            if r["by"] != "autotuning" and len(r["autotune_candidates"]) > 1:
                notes.append("autotuning will measure " + ", ".join(r["autotune_candidates"]))
            if r.get("explorations", 0) > 1:
                notes.append("measured {} times".format(r["explorations"]))
            if notes:
                line += "  (" + "; ".join(notes) + ")"
            print(line, file=out)


def format_description(d, out):
    """Writes description d (gotree.describe's dict) as text to out."""
    s = d["settings"]
    hosts = ", ".join("node {} = {}".format(k, v) for k, v in sorted(d["hosts"].items(), key=lambda kv: int(kv[0])))
    print("# gotree: {} ranks on {} node(s) ({}), as rank {} sees it".format(d["nranks"], d["nodes"], hosts, d["rank"]), file=out)
    print(
        "# GOTREE_ALGO={!r}, tuning {}, autotuning {}, channels {}-{}, FIFO {} per link, "
        "direct allreduce {}, shared allreduce {}, {} within a node, {} between nodes".format(
            s["algo"], s["tuning"], ("on, measured again" if s.get("autotune_again") else "on") if s["autotune"] else "off", s["min_channels"], s["max_channels"],
            _fmt_bytes(s["fifo_bytes"]), "yes" if s["direct"] else "no", "yes" if s["shared"] else "no",
            s["intra"], s["inter"],
        ),
        file=out,
    )
    for ch in d["channels"]:
        ring = " -> ".join(str(r) for r in ch["ring"] + ch["ring"][:1])
        print("\nChannel {}: ring {}".format(ch["channel"], ring), file=out)  # CUDA tensors: the same rings and trees, more channels
        kids = {}
        for r, p in enumerate(ch["tree_parent"]):
            kids.setdefault(p, []).append(r)
        parts = []
        for r, p in enumerate(ch["tree_parent"]):
            role = "root" if p < 0 else ("leaf" if r not in kids else "internal")
            parts.append("{} {}{}".format(r, role, " (children {})".format(", ".join(map(str, kids[r]))) if r in kids else ""))
        print("  tree: " + "; ".join(parts), file=out)
    links = {}
    for l in d["links"]:
        links.setdefault(l["transport"], set()).add(l["peer"])
    print("\nRank {}'s links: {}".format(d["rank"], "; ".join(
        "{} to {}".format(t, ", ".join(map(str, sorted(p)))) for t, p in sorted(links.items())) or "none"), file=out)
    sb = d.get("shared_buffers")
    if sb and (sb["buffers"] or sb["peer_buffers_mapped"] or sb["peer_buffers_copied"]):
        line = ("\nShared buffers (gotree.empty, the shared CPU allocator): {} in this process ({}); direct plans reached {} of the peers' "
                "through mappings".format(sb["buffers"], _fmt_bytes(sb["bytes"]), sb["peer_buffers_mapped"]))
        if sb["peer_buffers_copied"]:
            line += " and copied {} they could not map (last: {})".format(sb["peer_buffers_copied"], sb.get("last_error", "?"))
        if sb.get("cached") or sb.get("reused"):
            line += "; {} freed ones ({}) kept for reuse, {} allocations served from them".format(
                sb["cached"], _fmt_bytes(sb["cached_bytes"]), sb["reused"])
        print(line, file=out)
    alloc = (sb or {}).get("allocator") or {}
    if alloc.get("installed") and alloc.get("min_bytes"):
        line = "Shared CPU allocator: torch's CPU tensors of {} and more are allocated as shared buffers".format(
            _fmt_bytes(alloc["min_bytes"]))
        if not alloc.get("active"):
            line += " (but another allocator has replaced it since)"
        if alloc.get("fallbacks"):
            line += "; {} could not be and use torch's allocator".format(alloc["fallbacks"])
        print(line, file=out)
    print("\nCPU tensors:", file=out)
    _tables(d["choices"], "", out)
    if d.get("device_choices"):
        print("\nCUDA tensors (the device path: ring and tree kernels, NCCL's constants for GPU links, no autotuning):", file=out)
        _tables(d["device_choices"], " on CUDA buffers", out)
    print("\n(times in microseconds: the model's prediction of one out-of-place call, and autotuning's "
          "median of the fastest rank's time per call)", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gotree.explain", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4,4K,64K,1M,4M,64M", help="sizes in bytes, comma-separated (default 4,4K,64K,1M,4M,64M)")
    ap.add_argument("--tune", action="store_true", help="issue allreduces of each size until autotuning decided it")
    ap.add_argument("--file", help="print a description that GOTREE_GRAPH_DUMP_FILE wrote instead (no torchrun, no group)")
    a = ap.parse_args(argv)
    if a.file:
        import json

        with open(a.file) as f:
            format_description(json.load(f), sys.stdout)
        return 0
    try:
        sizes = [parse_size(x) for x in a.sizes.split(",") if x]
    except ValueError as e:
        ap.error(str(e))
    import torch.distributed as dist

    import gotree

    dist.init_process_group(backend="gotree")
    rank, n = dist.get_rank(), dist.get_world_size()
    wrong = _tune(sizes, rank, n) if a.tune else 0
    d = gotree.describe(sizes=sizes)
    if rank == 0:
        format_description(d, sys.stdout)
        if a.tune:
            print("# wrong results while tuning: {}".format(wrong))
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
