"""torchrun worker: gotree.describe says what runs. Every rank sees the same
rings and trees; its role follows from the tree's parents; and for an
allreduce size that autotuning has decided, an allgather and a broadcast,
the algorithm describe names is the one the flight record says the last
such call ran. Bad sizes raise ValueError."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gotree  # noqa: E402
from gotree.bench import AUTOTUNE_CALLS  # noqa: E402
from _common import Checker  # noqa: E402


def last_algo(desc_start):
    """The algorithm of the newest operation whose description starts so."""
    ops = [o for o in gotree.flight_record()["ops"] if o["desc"].startswith(desc_start)]
    return ops[-1].get("algo") if ops else None


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("describe")
    rank, n = dist.get_rank(), dist.get_world_size()

    # An allreduce size called often enough for autotuning to decide it,
    # an allgather and a broadcast, each checked exactly.
    t = torch.empty(1024, dtype=torch.float32)
    for i in range(AUTOTUNE_CALLS + 1):
        t.fill_(rank + 1)
        dist.all_reduce(t)
        c.check(bool((t == n * (n + 1) / 2).all()), f"allreduce {i}")
    out = torch.empty(n * 1000, dtype=torch.int32)
    dist.all_gather_into_tensor(out, torch.full((1000,), rank, dtype=torch.int32))
    c.check(torch.equal(out, torch.arange(n, dtype=torch.int32).repeat_interleave(1000)), "allgather")
    b = torch.full((333,), rank, dtype=torch.int64)
    dist.broadcast(b, src=n - 1)
    c.check(bool((b == n - 1).all()), "broadcast")

    d = gotree.describe(sizes=[4096, 4 * n * 1000, 8 * 333, 1000])
    c.check(d["rank"] == rank and d["nranks"] == n and d["nodes"] == 1, f"header {d['rank']}/{d['nranks']}/{d['nodes']}")
    for ch in d["channels"]:
        c.check(sorted(ch["ring"]) == list(range(n)), f"channel {ch['channel']}: ring {ch['ring']}")
        kids = [q for q, p in enumerate(ch["tree_parent"]) if p == rank]
        c.check(ch["up"] == ch["tree_parent"][rank] and sorted(ch["down"]) == kids, f"channel {ch['channel']}: up/down")
        role = "root" if ch["up"] < 0 else ("leaf" if not kids else "internal")
        c.check(ch["role"] == role, f"channel {ch['channel']}: role {ch['role']}, want {role}")
        pos = ch["ring"].index(rank)
        for q in (ch["ring"][(pos + 1) % n], ch["ring"][pos - 1]):
            c.check(
                {"channel": ch["channel"], "peer": q, "transport": "shm"} in d["links"],
                f"channel {ch['channel']}: no shm link to ring neighbour {q}",
            )
    views = [None] * n
    dist.all_gather_object(views, [(ch["ring"], ch["tree_parent"]) for ch in d["channels"]])
    c.check(all(v == views[0] for v in views), f"ranks see different rings or trees: {views}")

    choice = {(x["coll"], x["bytes"]): x for x in d["choices"]}
    ar = choice.get(("allreduce", 4096))
    c.check(ar is not None and ar["by"] == "autotuning", f"4 KiB allreduce after {AUTOTUNE_CALLS + 1} calls: {ar}")
    if ar is not None:
        c.check(ar["algo"] == last_algo("allreduce"), f"4 KiB allreduce: describe {ar['algo']}, ran {last_algo('allreduce')}")
        c.check(set(ar["measured_us"]) == set(ar["autotune_candidates"]), f"measured {ar['measured_us']}")
    ag = choice.get(("allgather", 4 * n * 1000))
    c.check(ag is not None and ag["algo"] == last_algo("allgather"), f"allgather: describe {ag}, ran {last_algo('allgather')}")
    bc = choice.get(("broadcast", 8 * 333))
    c.check(bc is not None and bc["algo"] == last_algo("broadcast"), f"broadcast: describe {bc}, ran {last_algo('broadcast')}")
    dev = d["device_choices"]
    c.check([(x["coll"], x["bytes"]) for x in dev] == [(x["coll"], x["bytes"]) for x in d["choices"]], "device choices at other sizes")
    c.check(all(x["algo"] in ("ring", "tree") and set(x["model_us"]) <= {"ring", "tree"} for x in dev), f"device algorithms: {dev}")
    # Bruck's order (hd allgather/reducescatter, ranks not a power of two)
    # is left out of auto above 512 KiB (algorithms.BruckAutoMaxBytes).
    full = gotree.describe()["choices"]
    for x in full:
        want = ["hd"] if x["coll"] in ("allgather", "reducescatter") and n & (n - 1) and x["bytes"] > 512 << 10 else []
        c.check(x["left_out_above_size"] == want, f"{x['coll']} {x['bytes']} bytes: left out {x['left_out_above_size']}, want {want}")
        if want:
            c.check(x["algo"] == "ring" and "hd" not in x["model_us"], f"{x['coll']} {x['bytes']} bytes: {x}")
    rounded = 1000 - 1000 % n
    c.check(("reducescatter", rounded) in choice, f"reducescatter of 1000 bytes not rounded to {rounded}")
    c.check(len(full) > len(d["choices"]), "the default sizes are more than four")
    c.expect_raises(lambda: gotree.describe(sizes=[-8]), "-8 bytes is negative", "negative size", (ValueError,))
    c.expect_raises(lambda: gotree.describe(sizes=[]), "sizes is empty", "no sizes", (ValueError,))
    c.finish()


if __name__ == "__main__":
    main()
