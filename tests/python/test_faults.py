"""Fault injection through torch.distributed with backend gotree (issue 8).

Each case asserts an error, not a hang, on every surviving rank within the group
timeout + 5 s (timeouts here are 5 s), with a text naming the rank(s) and the
collective where it can:

  kill       a rank SIGKILLs itself mid-allreduce (over shared memory and over TCP)
  link down  the veth link of one network namespace goes down mid-run (root + ip needed;
             tests/netns/netns.sh)
  never joins a rank never calls init (the missing rank is a non-root and the root)
  mismatch   different op / count / dtype / root / collective on one rank
  stranger   garbage, wrong-secret handshakes, half-open connections and a flood on the
             ranks' listening ports while collectives run: results stay exact
  fork       a forked child that calls a collective gets a RuntimeError at once; the parent
             (and DataLoader fork workers) keep working

The ranks are plain processes started here with env:// rendezvous (not torchrun: its
agent kills the survivors as soon as one worker dies). Every process runs in its own
session and is killed with its group if the case overruns. Each worker prints
`FAULT-RESULT {json}` lines (error text, seconds to error) and a GOTREE-CHECKS summary.
TCP is forced with a distinct GOTREE_HOST_ID per rank; every socket stays on loopback
(GOTREE_SOCKET_IFNAME==lo) except in the namespace case (10.77.0.x).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import CHECK_RE, REPO, WORKERS, assert_checks, torchrun, worker_env

sys.path.insert(0, str(WORKERS))
import faults_netns  # noqa: E402

TIMEOUT_S = 5
RESULT_RE = re.compile(r"^FAULT-RESULT (\{.*\})$", re.M)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """N worker processes (one per rank), each in its own session, output to files."""

    def __init__(self, script, ranks, world, args=(), env=None, rank_env=None, tmp=None):
        self.port = free_port()
        self.tmp = Path(tmp or tempfile.mkdtemp(prefix="gotree-faults-"))
        self.procs = {}
        self.files = {}
        base = worker_env(
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(self.port),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "FAULT_TIMEOUT_S": str(TIMEOUT_S),
                "FAULT_DIR": str(self.tmp),
                "GOTREE_SOCKET_IFNAME": "=lo",
                "TORCH_CPP_LOG_LEVEL": "ERROR",
            }
        )
        base.update(env or {})
        for r in ranks:
            e = dict(base, RANK=str(r), LOCAL_RANK=str(r))
            e.update((rank_env or {}).get(r, {}))
            f = open(self.tmp / f"rank{r}.log", "w+")
            self.files[r] = f
            self.procs[r] = subprocess.Popen(
                [sys.executable, str(WORKERS / script), *map(str, args)],
                cwd=REPO,
                env=e,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def pids(self):
        return {r: p.pid for r, p in self.procs.items()}

    def kill_all(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout):
        """Waits for every rank; on overrun kills them all and fails (a hang)."""
        deadline = time.monotonic() + timeout
        rcs = {}
        for r, p in self.procs.items():
            try:
                rcs[r] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                for q in self.procs.values():
                    q.wait()
                pytest.fail(f"ranks still running after {timeout} s (hang?)\n{self.output()[-8000:]}")
        return rcs

    def output(self, rank=None):
        out = []
        for r, f in sorted(self.files.items()):
            if rank is not None and r != rank:
                continue
            f.flush()
            f.seek(0)
            out.append(f.read())
        return "\n".join(out)

    def close(self):
        self.kill_all()
        for f in self.files.values():
            f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def results(out, case=None):
    recs = [json.loads(m) for m in RESULT_RE.findall(out)]
    return [r for r in recs if case is None or r["case"] == case]


def assert_summaries(out, ranks, rcs=None):
    """Every rank in `ranks` printed an OK checker summary (and exited 0)."""
    lines = CHECK_RE.findall(out)
    seen = {int(m[1]): m for m in lines}
    bad = [r for r in ranks if r not in seen or seen[r][5] != "OK" or int(seen[r][3]) < 1]
    if rcs is not None:
        bad += [r for r in ranks if rcs.get(r) != 0 and r not in bad]
    if bad:
        fails = "\n".join(l for l in out.splitlines() if " FAIL " in l or "Error" in l or "error" in l)
        pytest.fail(f"ranks {bad} did not pass (rcs={rcs}); summaries={lines}\n{fails[-6000:]}\n--- tail ---\n{out[-6000:]}")


def show(recs):
    for r in recs:
        print(f"  rank {r['rank']} [{r['case']}] {r.get('took_s', '?')} s: {r.get('error', '')[:600]}")


@pytest.fixture
def ranks_factory(built):
    made = []

    def make(*a, **k):
        r = Ranks(*a, **k)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


# --------------------------------------------------------------------------- (a) kill


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_sigkill_mid_allreduce(ranks_factory, transport):
    n = 3
    rank_env = {r: {"GOTREE_HOST_ID": f"fault-host{r}"} for r in range(n)} if transport == "tcp" else {}
    rk = ranks_factory("faults_kill.py", range(n), n, rank_env=rank_env)
    rcs = rk.wait(60)
    out = rk.output()
    assert rcs[n - 1] == -signal.SIGKILL, f"the victim was not SIGKILLed: rc={rcs[n - 1]}\n{out[-3000:]}"
    recs = results(out, "kill")
    show(results(out))
    assert {r["rank"] for r in recs} == set(range(n - 1)), f"not every survivor reported an error:\n{out[-6000:]}"
    assert all(r["took_s"] < TIMEOUT_S + 5 for r in recs)
    assert_summaries(out, range(n - 1), rcs)


# --------------------------------------------------------------------------- (c) never joins




@pytest.mark.parametrize(
    "missing,env",
    [
        pytest.param(2, {}, id="missing-rank2"),
        pytest.param(2, {"GOTREE_TIMEOUT_MS": str(TIMEOUT_S * 1000)}, id="missing-rank2-env-timeout"),
        pytest.param(0, {}, id="missing-rank0"),
    ],
)
def test_rank_never_joins_init(ranks_factory, missing, env):
    n = 3
    started = [r for r in range(n) if r != missing]
    rk = ranks_factory("faults_join.py", started, n, args=[missing], env=env)
    rcs = rk.wait(TIMEOUT_S + 30)
    out = rk.output()
    recs = results(out, "never-joins")
    show(recs)
    assert {r["rank"] for r in recs} == set(started), f"not every started rank raised:\n{out[-6000:]}"
    assert all(r["took_s"] < TIMEOUT_S + 5 for r in recs)
    assert_summaries(out, started, rcs)


# --------------------------------------------------------------------------- (d) mismatch


def test_mismatched_collectives(ranks_factory):
    n = 3
    rk = ranks_factory("faults_mismatch.py", range(n), n)
    rcs = rk.wait(90)
    out = rk.output()
    recs = [r for r in results(out) if r["case"].startswith("mismatch-")]
    show(recs)
    for case in ["op", "count", "dtype", "root", "collective", "plans"]:
        got = {r["rank"] for r in recs if r["case"] == "mismatch-" + case}
        assert got == set(range(n)), f"{case}: ranks {sorted(set(range(n)) - got)} did not raise:\n{out[-6000:]}"
    assert all(r["took_s"] < TIMEOUT_S + 5 for r in recs)
    assert_summaries(out, range(n), rcs)


def test_mismatched_plans_do_not_wait_for_the_timeout(ranks_factory):
    """At 4 ranks an all_reduce of 3 int64 on one rank and of 5 on the others runs two plans
    that leave every rank waiting on a link nobody writes: every rank must raise long before
    a generous timeout, through the stall check, naming both calls."""
    n = 4
    rk = ranks_factory("faults_mismatch.py", range(n), n, args=["plans"], env={"FAULT_TIMEOUT_S": "60"})
    rcs = rk.wait(120)
    out = rk.output()
    recs = [r for r in results(out) if r["case"] == "mismatch-plans"]
    show(recs)
    assert {r["rank"] for r in recs} == set(range(n)), f"not every rank raised:\n{out[-6000:]}"
    assert all(r["took_s"] < 15 for r in recs), "the errors came from the 60 s timeout"
    assert any("(3 x int64, sum)" in r["error"] and "(5 x int64, sum)" in r["error"] for r in recs)
    assert_summaries(out, range(n), rcs)


# The worker of test_mismatch_fails_every_rank_in_the_same_call, written to a temporary
# file by the test (the worker scripts of workers/ belong to other cases). Through
# torchrun: every rank survives its error, so its agent has nothing to kill.
SAME_CALL_WORKER = r"""
import datetime

from faults_common import Checker, call_error, report, text_of, timeout_s

import torch
import torch.distributed as dist

# (name, roots by rank): one odd rank; nobody names itself (each names the next rank,
# so in every rank's view someone else is the root); everyone names itself.
BROADCASTS = [("odd", [0, 0, 1]), ("rotated", [1, 2, 0]), ("self", [0, 1, 2])]
# (name, (from, to, elements `from` sends, elements `to` expects)): the other pairs agree.
SPLITS = [("fewer-expected", (0, 2, 3, 2)), ("none-sent", (1, 0, 0, 2))]


def split_matrix(n, case):
    send = [[r + p + 1 for p in range(n)] for r in range(n)]  # send[r][p]: r -> p
    expect = [[send[p][r] for p in range(n)] for r in range(n)]  # expect[r][p]: p -> r
    if case is not None:
        src, dst, sends, expects = case
        send[src][dst] = sends
        expect[dst][src] = expects
    return send, expect


def main():
    T = timeout_s()
    dist.init_process_group(backend="gotree", timeout=datetime.timedelta(seconds=T))
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("faults-same-call")

    def fresh():
        g = dist.new_group(backend="gotree", timeout=datetime.timedelta(seconds=T))
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        c.check(torch.equal(t, torch.full((4,), float(n))), "a fresh group works")
        return g

    def expect_error(case, fn, names):
        g = fresh()
        e, took = call_error(lambda: fn(g))
        c.check(e is not None, f"{case}: rank {rank}'s call raised (not only a later one)")
        if e is not None:
            text = text_of(e)
            report(case, took_s=round(took, 3), error=text)
            c.check(took < T, f"{case}: error within the timeout (took {took:.2f} s)")
            c.check("issued different collectives" in text, f"{case}: the text says the ranks disagree: {text[:600]!r}")
            c.check(all(p in text for p in names), f"{case}: the text names {names}: {text[:900]!r}")
        e2, _ = call_error(lambda: dist.all_reduce(torch.ones(4), group=g))
        c.check(e2 is not None and "abort" in str(e2), f"{case}: the group is aborted afterwards")
        w = torch.ones(4)
        dist.all_reduce(w)
        c.check(torch.equal(w, torch.full((4,), float(n))), f"{case}: the world group still works")

    # consistent calls still work, with exact results
    g = fresh()
    t = torch.arange(1000, dtype=torch.float32) + 100 * rank
    dist.broadcast(t, src=1, group=g)
    c.check(torch.equal(t, torch.arange(1000, dtype=torch.float32) + 100), "broadcast from 1")
    send, expect = split_matrix(n, None)
    inp = torch.cat([torch.full((send[rank][p],), float(10 * rank + p)) for p in range(n)])
    out = torch.empty(sum(expect[rank]))
    dist.all_to_all_single(out, inp, expect[rank], send[rank], group=g)
    want = torch.cat([torch.full((expect[rank][p],), float(10 * p + rank)) for p in range(n)])
    c.check(torch.equal(out, want), "all_to_all_single with uneven splits")

    for name, roots in BROADCASTS:
        t = torch.full((1000,), float(rank))
        # every text names this rank's root and some other rank's root
        mine = f"root {roots[rank]})"
        others = sorted({f"root {r})" for r in roots} - {mine})
        expect_error(
            "broadcast-" + name,
            lambda g: dist.broadcast(t, src=roots[rank], group=g),
            [mine, "root", "broadcast"] + ([others[0]] if name == "odd" else []),
        )

    for name, case in SPLITS:
        send, expect = split_matrix(n, case)
        inp = torch.zeros(sum(send[rank]))
        out = torch.empty(sum(expect[rank]))
        src, dst, sends, expects = case
        expect_error(
            "alltoall-" + name,
            lambda g: dist.all_to_all_single(out, inp, expect[rank], send[rank], group=g),
            [f"rank {src} sends {sends} x float32 to rank {dst}, which expects {expects} from it"],
        )
    c.exit_now()


main()
"""


def test_mismatch_fails_every_rank_in_the_same_call(built, tmp_path):
    """Broadcast with ranks that disagree on the root, and all-to-all(v) with splits that
    disagree between two ranks: every rank's *same* call raises (a rank whose root or
    splits agree with some peers included), within the timeout, naming the disagreement;
    consistent calls on a fresh group stay exact."""
    n = 3
    script = tmp_path / "faults_same_call.py"
    script.write_text(SAME_CALL_WORKER)
    env = worker_env({"FAULT_TIMEOUT_S": str(TIMEOUT_S), "GOTREE_SOCKET_IFNAME": "=lo", "TORCH_CPP_LOG_LEVEL": "ERROR"})
    rc, out = torchrun(script, n, timeout=240, env=env)
    recs = results(out)
    show(recs)
    cases = ["broadcast-odd", "broadcast-rotated", "broadcast-self", "alltoall-fewer-expected", "alltoall-none-sent"]
    for case in cases:
        got = {r["rank"] for r in recs if r["case"] == case}
        assert got == set(range(n)), f"{case}: ranks {sorted(set(range(n)) - got)} did not raise in that call:\n{out[-6000:]}"
    assert all(r["took_s"] < TIMEOUT_S for r in recs if r["case"] in cases)
    assert_checks(rc, out, n, min_passed=30)


# --------------------------------------------------------------------------- (f) fork


def test_fork_after_init(ranks_factory):
    n = 2
    rk = ranks_factory("faults_fork.py", range(n), n, args=["call"])
    rcs = rk.wait(90)
    out = rk.output()
    show([r for r in results(out) if r["case"].startswith("fork-child")])
    assert_summaries(out, range(n), rcs)
    got = {(r["rank"], r["case"]) for r in results(out)}
    for r in range(n):
        assert (r, "fork-child-all_reduce") in got and (r, "fork-child-broadcast") in got and (r, "fork-parent") in got


def test_fork_child_normal_exit(ranks_factory):
    rk = ranks_factory("faults_fork.py", [0], 1, args=["exit"])
    rcs = rk.wait(40)
    out = rk.output()
    show(results(out, "fork-child-exit"))
    assert_summaries(out, [0], rcs)


# --------------------------------------------------------------------------- (e) strangers


def listening_sockets(pids, exclude_ports=()):
    """[(pid, ip, port)] of the TCP sockets in LISTEN state owned by `pids`."""
    rows = {}
    for kind in ("tcp", "tcp6"):
        try:
            with open(f"/proc/net/{kind}") as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[3] != "0A":
                        continue
                    ip_hex, port_hex = p[1].rsplit(":", 1)
                    if kind == "tcp":
                        ip = socket.inet_ntoa(bytes.fromhex(ip_hex)[::-1])
                    else:
                        ip = "::" if set(ip_hex) == {"0"} else ip_hex
                    rows[p[9]] = (ip, int(port_hex, 16))
        except OSError:
            pass
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            m = re.match(r"socket:\[(\d+)\]", link)
            if m and m.group(1) in rows and rows[m.group(1)][1] not in exclude_ports:
                found.append((pid, *rows[m.group(1)]))
    return sorted(set(found))


class Stranger:
    """Connections that do not know the secret; records what the listener did."""

    def __init__(self, port):
        self.port = port
        self.log = []  # (attack, outcome) pairs
        self.got_ok = []

    def conn(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return s

    def drain(self, s, what, limit=8.0, t0=None):
        """Reads until the listener closes; records how long it took and what came."""
        t0 = t0 or time.monotonic()
        data = b""
        s.settimeout(0.25)
        while time.monotonic() - t0 < limit:
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        closed = time.monotonic() - t0 < limit
        if b"GTOK" in data:
            self.got_ok.append(what)
        self.log.append((what, closed, round(time.monotonic() - t0, 2), data[:4]))
        s.close()

    def send_then_drain(self, what, payload, read_challenge=False):
        try:
            s = self.conn()
            t0 = time.monotonic()
            if read_challenge:
                s.settimeout(5)
                ch = b""
                while len(ch) < 36:
                    part = s.recv(36 - len(ch))
                    if not part:
                        break
                    ch += part
            try:
                s.sendall(payload)
            except OSError:
                pass
            self.drain(s, what, t0=t0)
        except OSError as e:
            self.log.append((what, True, 0.0, f"connect: {e}".encode()))

    def hello(self, kind=2, rank=0, channel=0xFFFFFFFF):
        return b"GTHC" + bytes([kind]) + rank.to_bytes(4, "little") + channel.to_bytes(4, "little") + os.urandom(64)

    def run(self, rounds):
        """Fast refusals: the listener can tell at once that these are not gotree peers."""
        replay = self.hello()
        for _ in range(rounds):
            self.send_then_drain("garbage", os.urandom(65536))
            self.send_then_drain("wrong-secret", self.hello(), read_challenge=True)
            self.send_then_drain("replayed-hello", replay, read_challenge=True)
            self.send_then_drain("absurd-fields", self.hello(kind=77, rank=0x7FFFFFFF, channel=0x7FFFFFFF), read_challenge=True)
            try:  # reset right after connecting
                s = self.conn()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, (1).to_bytes(4, "little") * 2)
                s.close()
            except OSError:
                pass

    def run_short(self, what):
        """Short writes: the listener waits for the rest until its handshake deadline."""
        if what == "http":
            self.send_then_drain("http", b"GET / HTTP/1.0\r\n\r\n\xff\xff\xff\xff")
        else:
            self.send_then_drain("truncated-hello", b"GTHC\x02\x00\x00", read_challenge=True)

    def half_open(self, count):
        """Silent connections, partial hellos, a slow writer: the listener must close
        each within its handshake deadline (3 s) rather than keep it forever."""
        socks = []
        for i in range(count):
            try:
                s = self.conn()
            except OSError:
                continue
            t0 = time.monotonic()
            if i % 3 == 1:
                s.sendall(b"GTHC\x02")
            socks.append((s, t0, "silent" if i % 3 == 0 else "partial" if i % 3 == 1 else "slow-writer"))
        deadline = time.monotonic() + 10
        pending = list(socks)
        while pending and time.monotonic() < deadline:
            nxt = []
            for s, t0, what in pending:
                if what == "slow-writer":
                    try:
                        s.send(b"G")
                    except OSError:
                        pass
                s.settimeout(0.01)
                try:
                    chunk = s.recv(4096)
                    if chunk and b"GTOK" in chunk:
                        self.got_ok.append(what)
                    if chunk == b"":
                        self.log.append(("half-open " + what, True, round(time.monotonic() - t0, 2), b""))
                        s.close()
                        continue
                except socket.timeout:
                    pass
                except OSError:
                    self.log.append(("half-open " + what, True, round(time.monotonic() - t0, 2), b""))
                    s.close()
                    continue
                nxt.append((s, t0, what))
            pending = nxt
            time.sleep(0.2)
        for s, t0, what in pending:
            self.log.append(("half-open " + what, False, round(time.monotonic() - t0, 2), b""))
            s.close()

    def flood(self, count):
        socks = []
        for _ in range(count):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=2))
            except OSError:
                break
        time.sleep(1.0)
        for s in socks:
            s.close()
        self.log.append(("flood", True, 0.0, f"{len(socks)} connections".encode()))
        self.flooded = len(socks)


def test_strangers_on_listening_ports(ranks_factory):
    import threading

    n = 3
    # rank 2 on another "host": TCP links to it, shared memory between ranks 0 and 1
    rank_env = {2: {"GOTREE_HOST_ID": "fault-host-b"}}
    rk = ranks_factory("faults_stranger.py", range(n), n, env={"GOTREE_DEBUG": "WARN"}, rank_env=rank_env)
    deadline = time.monotonic() + 45
    while not all((rk.tmp / f"ready.{r}").exists() for r in range(n)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in rk.procs.values()):
            rk.kill_all()
            pytest.fail("ranks did not get ready:\n" + rk.output()[-6000:])
        time.sleep(0.1)
    pids = list(rk.pids().values())
    targets = listening_sockets(pids, exclude_ports={rk.port})  # rk.port: torch's TCPStore, not ours
    print(f"listening sockets of the ranks (TCPStore port {rk.port} excluded): {targets}")
    assert targets, "found no gotree listening socket to attack"
    assert all(ip == "127.0.0.1" for _, ip, _ in targets), f"a listener is not bound to the chosen interface only: {targets}"
    strangers = [Stranger(port) for _, _, port in targets]
    threads = []
    for st in strangers:
        threads += [
            threading.Thread(target=st.run, args=(3,)),
            threading.Thread(target=st.run_short, args=("http",)),
            threading.Thread(target=st.run_short, args=("truncated",)),
            threading.Thread(target=st.half_open, args=(12,)),
            threading.Thread(target=st.flood, args=(300,)),
        ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    attack_s = time.monotonic() - t0
    (rk.tmp / "stop").write_text("")
    rcs = rk.wait(60)
    out = rk.output()
    recs = results(out, "stranger")
    for st in strangers:
        kinds = {}
        for what, closed, took, _ in st.log:
            k = kinds.setdefault(what, [0, 0, 0.0])
            k[0] += 1
            k[1] += closed
            k[2] = max(k[2], took)
        print(f"port {st.port}: " + ", ".join(f"{w}: {c}/{t} closed by the listener (max {m:.1f} s)" for w, (t, c, m) in sorted(kinds.items())))
    print("flood: " + ", ".join(f"{st.flooded} connections held open at once on port {st.port}" for st in strangers))
    print(f"attack lasted {attack_s:.1f} s; " + "; ".join(f"rank {r['rank']}: {r['iterations']} iterations, {r['wrong']} wrong" for r in recs))
    refused = out.count("refused a connection")
    print(f"{refused} 'refused a connection' warnings logged by the ranks; one per kind of reason:")
    seen = {}
    for line in out.splitlines():
        if "refused a connection" in line:
            reason = re.sub(r"127\.0\.0\.1:\d+", "ADDR", line.split("refused a connection", 1)[1])
            seen.setdefault(re.sub(r"\d+", "N", reason), line)
    for line in list(seen.values())[:8]:
        print("   ", line[:300])
    assert not any(st.got_ok for st in strangers), "a stranger completed the handshake: " + str([st.got_ok for st in strangers])
    lingering = [(st.port, w, t) for st in strangers for w, closed, t, _ in st.log if not closed]
    assert not lingering, f"stranger connections the listener never closed: {lingering[:10]}"
    assert refused >= len(targets), "the refusals were not logged"
    assert_summaries(out, range(n), rcs)
    assert all(r["wrong"] == 0 for r in recs) and len(recs) == n


# --------------------------------------------------------------------------- (b) link down


def test_link_down_between_namespaces(built):
    why = faults_netns.unavailable()
    if why:
        pytest.skip("link-down case skipped: " + why)
    tmp = Path(tempfile.mkdtemp(prefix="gotree-faults-link-"))
    os.chmod(tmp, 0o777)
    per, nodes = 2, 2
    world = per * nodes
    env = worker_env(
        {
            "FAULT_DIR": str(tmp),
            "FAULT_TIMEOUT_S": str(TIMEOUT_S),
            "MASTER_PORT": "29531",
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(per),
            "TORCH_CPP_LOG_LEVEL": "ERROR",
        }
    )
    script = (
        f"for l in $(seq 0 {per - 1}); do RANK=$((NODE_RANK*{per}+l)) LOCAL_RANK=$l "
        f"{sys.executable} {WORKERS / 'faults_link.py'} > {tmp}/rank$((NODE_RANK*{per}+l)).log 2>&1 & done; wait"
    )
    t_start = time.monotonic()
    with faults_netns.exclusive():
        t_lock = time.monotonic()
        proc = subprocess.Popen(
            ["bash", str(faults_netns.NETNS), "run", str(nodes), "--", "bash", "-c", script],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not all((tmp / f"ready.{r}").exists() for r in range(world)):
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("ranks did not get ready:\n" + "\n".join(p.read_text() for p in sorted(tmp.glob("rank*.log")))[-6000:])
                time.sleep(0.1)
            t_ready = time.monotonic()
            time.sleep(0.5)
            (tmp / "cut").write_text(repr(time.time()))
            r = faults_netns.netns_exec(1, "ip", "link", "set", "veth0", "down")
            assert r.returncode == 0, r.stdout
            try:
                netns_out, _ = proc.communicate(timeout=TIMEOUT_S + 30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                pytest.fail("ranks still running 35 s after the link went down (hang?):\n" + "\n".join(p.read_text() for p in sorted(tmp.glob("rank*.log")))[-6000:])
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        t_done = time.monotonic()
    t_down = time.monotonic()
    print(
        f"phases: lock {t_lock - t_start:.1f} s, namespaces up + ranks ready {t_ready - t_lock:.1f} s, "
        f"cut to all exited {t_done - t_ready:.1f} s, teardown {t_down - t_done:.1f} s"
    )
    out = "\n".join(p.read_text() for p in sorted(tmp.glob("rank*.log")))
    shutil.rmtree(tmp, ignore_errors=True)
    recs = results(out, "link-down")
    for rec in recs:
        print(f"  rank {rec['rank']} {rec['since_cut_s']} s after the cut: {rec['error'][:600]}")
    assert {rec["rank"] for rec in recs} == set(range(world)), f"not every rank raised:\n{out[-6000:]}\n{netns_out[-2000:]}"
    assert all(rec["since_cut_s"] is not None and rec["since_cut_s"] < TIMEOUT_S + 5 for rec in recs)
    assert_summaries(out, range(world))
