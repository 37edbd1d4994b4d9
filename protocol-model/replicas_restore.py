#!/usr/bin/env python3
"""Restore after the loss (docs/replication.md, "Restore"), on top of
replicas.py: after M's mirror was activated, a new empty node N joins as
M's mirror, a restorer copies the share while clients keep writing, then M
is lost as well and N is activated; the audit must still hold.

Phases (ites[2S]): 0-2 as in replicas.py; 3 N joined and restoring (N is the
mirror: ITEs from 0, DTE images absent until copied or written); 4 M lost;
5 N active.  Environment script: LOSS, ACTIVATE, JOIN, LOSS2, ACTIVATE2.
JOIN and ACTIVATE2 wait until no op is running (the drain of each view
change); LOSS2 waits until the restorer is done (the switch comes after the
copy).

Per DTE slot, bit 4 of FL says whether N holds the slot's current image
(written by its allocation after the join, RP1, or copied); bits 2-3 are N's
status word.  The restorer (a client of its own, on N) runs the doc's copy:
  * every ITE: sync from 0 (`sync(s, 0, READ primary(s))`);
  * every DTE slot: copy-then-verify: READ the slot from the primary, WRITE
    it to N, READ the primary's state word again, repeat while it differs.
A WRITE of an image whose slot was reused since its READ leaves N a stale
image (bit 4 clear).  At ACTIVATE2 a slot whose image N lacks is garbage
(a new generation): an ITE that names it is DANGLING.  N's `expires_at`
copies are taken equal to the primary's (not modelled).

usage: python3 replicas_restore.py [VARIANTS|all] [CONFIGS|all] [max_states] [time_limit_s]
  'fix+zs+cv+cm' must be clean; every other variant must show a counterexample
  (exit status 1 otherwise).
"""
import io
import sys
import time

import replicas as R
from replicas import mc, mstat, set_mstat

U, G, FL, ST = mc.U, mc.G, mc.FL, mc.ST
IMG = 16
ZS = 1          # fix ZS: N's ITEs start at a value no primary ITE ever holds
UNSET = 3       # fix CV: N's status words start at a value no RP3 CAS expects
mc.SN[UNSET] = 'UNSET'
REST_OPS = ('join', 'loss2', 'activate2')


def has_img(r):
    return bool(r[FL] & IMG)


def op_restore(x):
    m = x.m
    for s in range(m.S):
        R.sync(x, s, ZS if m.zsync else 0, x.ri(s))
    for p in range(m.P):
        while True:
            seen = x._real(('rslot', p))
            x._real(('wslot', p, seen))
            if x._real(('rslot', p)) == seen:
                break
    return mc.DONE(mc.R_TO)


_run_op = mc.run_op


def run_op(x, op):
    if op[0] in REST_OPS:
        x._real((op[0],))
        return mc.DONE(mc.R_TO)
    if op[0] == 'restore':
        return op_restore(x)
    return _run_op(x, op)


mc.run_op = run_op
_fmt_op = mc.fmt_op
mc.fmt_op = lambda op: op[0].upper() if op[0] in REST_OPS + ('restore',) else _fmt_op(op)


class RRModel(R.RModel):
    zsync = cv = cm = False
    # The restorer walks DTE slots by index, so the shared canonical form,
    # which renumbers slots, would not keep its progress: no reduction here.
    raw = property(lambda self: True, lambda self, value: None)

    def __init__(self, nslots, keys, scripts, on_p, **kw):
        mc.Model.__init__(self, nslots, keys, list(scripts) + [[('restore',)]] + [
            [('loss',), ('activate',), ('join',), ('loss2',), ('activate2',)]], **kw)
        self.E = self.N - 2
        self.RS = self.N - 3
        self.on_p = set(on_p)

    def apply(self, m, op):
        if op[0] in REST_OPS + ('restore',):
            return tuple(m), mc.R_TO
        return R.RModel.apply(self, m, op)

    def step(self, st, c, log=None):
        if c == self.RS and st[0][2 * self.S] != 3:
            return []                           # the restorer runs on N while it restores
        if st[0][2 * self.S] >= 4 and c < self.RS:
            return []
        return R.RModel.step(self, st, c, log)

    def expire(self, st, c):
        return [] if c == self.RS else R.RModel.expire(self, st, c)

    def crash(self, st, c):
        return st if c == self.RS else R.RModel.crash(self, st, c)

    def perform(self, w, c, act):
        k = act[0]
        S = self.S
        ph = w.ites[2 * S]
        running = [d for d in range(self.RS) if w.clients[d][1] == 1 and not (w.crashed >> d) & 1]
        if k == 'join':
            if running:
                return []
            w.ites[2 * S] = 3
            w.ites[S:2 * S] = [ZS if self.zsync else 0] * S
            for p, r in enumerate(w.slots):
                w.slots[p] = set_mstat(r[:FL] + (r[FL] & 3,) + r[FL + 1:], UNSET if self.cv else 0)
            w.log is not None and w.say('JOIN: N, empty, is the mirror; its restorer starts')
            return [(0, w)]
        if k == 'loss2':
            if not self.done(self.RS, w.clients):
                return []
            w.ites[2 * S] = 4
            for d in range(self.RS):
                if not self.done(d, w.clients) and not (w.crashed >> d) & 1:
                    w.crashed = (w.crashed | (1 << d)) & ~((1 << (mc.EXP + d)) | (1 << (mc.ARM + d)))
                    if w.clients[d][1] == 1:
                        w.clients[d] = (w.clients[d][0], 1, 0, ())
                    self.clear_bit(w, d)
            w.log is not None and w.say('LOSS2 of M: its clients crash, its memory is gone')
            return [(0, w)]
        if k == 'activate2':
            w.ites[:S] = w.ites[S:2 * S]
            w.ites[S:2 * S] = [0] * S
            w.ites[2 * S] = 5
            for p, r in enumerate(w.slots):
                if not r[U]:
                    continue
                if has_img(r):
                    w.slots[p] = set_mstat(r[:ST] + (mstat(r),) + r[ST + 1:], 0)
                else:
                    g = r[G] + 1 if self.raw else mc.GB - 1
                    w.slots[p] = (1, g, 0, 0, 0, 0, 0, -1, -1, mc.VAL, 1, 0)
            w.slots = [r[:FL] + (r[FL] & 3,) + r[FL + 1:] for r in w.slots]
            w.log is not None and w.say('ACTIVATE2: N is the primary')
            return [(0, w)]
        if k == 'rslot':
            r = w.slots[act[1]]
            seen = (mc.mk(mc.OCC, act[1], r[G]), r[ST]) if r[U] else (0, 0)
            w.log is not None and w.say('restorer READ d%d: %s' % (act[1], self.fmt_rec(act[1], r)))
            return [(seen, w)]
        if k == 'wslot':
            p, (ref, st) = act[1], act[2]
            r = w.slots[p]
            if ref and r[U] and r[G] == mc.vgen(ref):
                if self.cv:
                    # fix CV: N's status word moves forward only (UNSET ->
                    # any; INVALID -> VALID/ABORTED; VALID -> ABORTED)
                    cur = mstat(r)
                    if not (cur == UNSET or (cur == mc.INV and st != mc.INV)
                            or (cur == mc.VAL and st == mc.ABT)):
                        st = cur
                w.slots[p] = set_mstat(r[:FL] + (r[FL] | IMG,) + r[FL + 1:], st)
                w.log is not None and w.say('restorer WRITE d%d to N (status %s)' % (p, mc.SN[st]))
            elif r[U]:
                w.slots[p] = r[:FL] + (r[FL] & ~IMG,) + r[FL + 1:]
                w.log is not None and w.say('restorer WRITE d%d to N: a stale image' % p)
            return [(0, w)]
        if k == 'mcst' and ph == 3 and not has_img(w.slots[mc.vslot(act[1])]):
            if w.expired(c) and not (w.crashed >> (mc.ARM + c)) & 1:
                return [('TO', w)]
            w.crashed &= ~(1 << (mc.ARM + c))
            w.log is not None and w.say('CAS N status of %s: no image there yet, fails' % self.dn(act[1]))
            return [(UNSET, w)]
        if k == 'wimg':
            p = mc.vslot(act[1])
            r = w.slots[p]
            if r[U] and r[G] == mc.vgen(act[1]):
                w.slots[p] = set_mstat(r[:FL] + (r[FL] | IMG,) + r[FL + 1:], mc.INV)
            w.log is not None and w.say('WRITE the image of %s to N again' % self.dn(act[1]))
            return [(0, w)]
        out = R.RModel.perform(self, w, c, act)
        if k == 'alloc' and ph == 3:
            fixed = []
            for ref, w2 in out:
                if ref is not None:
                    p = mc.vslot(ref)
                    r = w2.slots[p]
                    w2.slots[p] = r[:FL] + (r[FL] | IMG,) + r[FL + 1:]
                fixed.append((ref, w2))
            out = fixed
        return out

    def dn(self, v):
        return 'Z' if v == ZS else R.RModel.dn(self, v)

    def fmt_rec(self, p, r):
        s = R.RModel.fmt_rec(self, p, r[:FL] + (r[FL] & ~IMG,) + r[FL + 1:])
        return s[:-1] + ' N-image}' if r[U] and has_img(r) else s


class RRCtx(R.RCtx):
    def mcst(self, at, to, frm=mc.INV):
        r = R.RCtx.mcst(self, at, to, frm)
        while self.m.cm and to == mc.VAL and r == UNSET:
            # fix CM: no primary commit before the mirror's commit CAS
            # succeeded; a mirror without the image gets it again
            self._chk(self._real(('wimg', at)))
            r = R.RCtx.mcst(self, at, to, frm)
        return r


mc.Ctx = RRCtx


class RRWorld(R.RWorld):
    def running(self):
        # the restorer has no deadline: no reuse waits for it or stops it
        return tuple(cr for cr in R.RWorld.running(self) if cr[0] != self.m.RS)

    def has_mirror(self, c):
        ph = self.phase()
        if ph >= 3:
            return ph == 3
        return R.RWorld.has_mirror(self, c)


mc.World = RRWorld

K2 = {1: (0, 1), 2: (1, 0)}
CONFIGS = {
    # k2's first insert (into empty s1) by a zombie on M, helped by a GET
    # while the restorer copies s1
    'r1': (2, K2, {0: (1, 1)}, [[], [('put', 2, 6)], [('get', 2)]], {0},
           dict(ndte=3, max_zombies=1), 'after the activation: PUT(k2) new key, GET(k2), restorer'),
    'r2': (2, K2, {0: (1, 1)}, [[('put', 1, 5)], [('put', 1, 6), ('del', 1)]], {0},
           dict(ndte=3), 'PUT(k1) on P; PUT then DELETE of k1 on M across the join'),
}
VARIANTS = {
    'fix': R.FIX,                                   # the restore as the doc has it
    'fix+zs': R.FIX + ('zsync',),
    'fix+zs+cv': R.FIX + ('zsync', 'cv'),
    'fix+zs+cv+cm': R.FIX + ('zsync', 'cv', 'cm'),  # all three restore fixes
    'fix+cv+cm': R.FIX + ('cv', 'cm'),              # ... without ZS
    'fix+zs+cm': R.FIX + ('zsync', 'cm'),           # ... without CV
}
CLEAN = 'fix+zs+cv+cm'


def build(cname, vname):
    ns, keys, init, scripts, on_p, opts, _ = CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = R.rules.VARIANTS['rs']
    kw.update(model_kw)
    m = RRModel(ns, keys, scripts, on_p, init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    for f in VARIANTS[vname]:
        setattr(m, f, True)
    return m


def main(argv, variants=None, configs=None, build_model=None, clean=None):
    """Runs the variants and configurations argv names; every variant but
    `clean` must show a counterexample, `clean` none (exit status 1
    otherwise). The tables default to this file's; replicas_switch.py
    passes its own."""
    variants = VARIANTS if variants is None else variants
    configs = CONFIGS if configs is None else configs
    build_model = build if build_model is None else build_model
    clean = CLEAN if clean is None else clean
    vs = list(variants) if len(argv) < 2 or argv[1] == 'all' else argv[1].split(',')
    cs = list(configs) if len(argv) < 3 or argv[2] == 'all' else argv[2].split(',')
    max_states = int(argv[3]) if len(argv) > 3 else 3_000_000
    time_limit = float(argv[4]) if len(argv) > 4 else 600
    rows = []
    for v in vs:
        for c in cs:
            t0 = time.time()
            m = build_model(c, v)
            r = mc.explore(m, name='%s [%s]' % (c, v), max_states=max_states,
                           time_limit=time_limit, liveness=True)
            buf = io.StringIO()
            mc.report(m, r, out=buf, maxlines=200)
            print(buf.getvalue(), flush=True)
            rows.append((c, v, r['states'], 'limit' if r['limit'] else (
                'VIOLATION' if r['violations'] else 'clean'), time.time() - t0))
    bad = []
    for row in rows:
        print('%-5s %-13s %10d %-10s %8.1f' % row)
    for v in vs:
        res = [row[3] for row in rows if row[1] == v]
        if v == clean and any(x != 'clean' for x in res):
            bad.append('%s fails' % v)
        if v != clean and 'VIOLATION' not in res:
            bad.append('%s (expected to fail) shows no counterexample' % v)
    for b in bad:
        print('FAIL: ' + b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
