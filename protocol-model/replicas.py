#!/usr/bin/env python3
"""Replication with r = 2 and the loss of a host, checked with the shared
recycling model (docs/replication.md, rules RP0-RP6).

This file imports the shared bounded model checker (mc_recycle.py, through
rules.py, which installs the implementation's op_get / op_write) and changes
only what replication adds.  Nothing of the shared model is copied.

Two nodes: P, which will be lost, and M, which survives.  The modelled index
and every DTE slot are share P: primary ITEs on P, mirror ITEs on M.  A DTE
image is the same on both replicas from its allocation on (RP1), and so is
its staging (RP5: expires_at goes to both); only the status word differs, so
each slot record carries a mirror status besides its primary status.

State layout (the shared 5-tuple, so the shared explorer, canonical form and
trace replay work unchanged):
  ites = primary ITEs [0, S) + mirror ITEs [S, 2S) + (phase, old)
         phase: 0 before the loss, 1 lost (M's mirror not yet active),
                2 activated (the mirror is the primary; no mirror any more)
         old:   mask of clients whose running op started before the loss
  slot record FL field: bits 0-1 the entry's flags, bits 2-3 its mirror status.

Client verbs added: mirror ITE CAS ('mcas'), mirror status CAS ('mcst');
the sync reads the primary with the ordinary ITE READ.  Every primary ITE
CAS a client wins is remembered, and its sync (RP2, the loop of the doc, one
verb per step) runs at the latest moment the rules allow: before the next
status CAS (the commit waits for it, RP4; the syncs ride with the reverse
pass), before any stage WRITE (RP5), and at the end of the attempt.

Environment (a pseudo-client just before the auditor, script LOSS then
ACTIVATE, so the audit runs after the activation):
  LOSS      every client on P crashes; every primary verb of an op that
            started before the loss fails (R_TO); every such op of a client on
            M is past its deadline, but a mirror CAS it had armed may land.
  ACTIVATE  enabled when no op that started before the loss is running (the
            drain, RP0); the mirror ITEs and statuses become the primary's.

Fixes found necessary (REPORT-replicas.md; flags on the model):
  dl  a helper treats an owner as dead only once every CAS the owner armed
      has landed (dead-owner margin + the landing bound)
  ab  an abort makes the mirror status ABORTED (INVALID -> ABORTED, or
      VALID -> ABORTED when the owner's mirror commit got there first)
      before anything is restored; every restore does it first
  rf  a helper that rolls a dead MIGRATE copy forward first syncs the copy's
      destination link and source marker to the mirror

usage: python3 replicas.py [VARIANTS|all] [CONFIGS|all] [max_states] [time_limit_s]
  VARIANTS: 'fix' and 'grace' must be clean; 'rp' (the design as written),
  'no-dl', 'no-ab', 'no-rf' and the mutants m1..m6 (each on top of the
  fixes) must each show a counterexample in some config; default: all.
  Exit status 1 if a clean variant fails or hits a limit, or an
  expected-to-fail variant shows no counterexample.
"""
import io
import itertools
import sys
import time

import rules  # noqa: F401  (installs the implementation's op_get / op_write)
from rules import mc

INV, VAL, ABT = mc.INV, mc.VAL, mc.ABT
U, G, FL, ST, OWN = mc.U, mc.G, mc.FL, mc.ST, mc.OWN
MS = 2                      # mirror status: FL bits 2-3
EXP, ARM = mc.EXP, mc.ARM
PRIMARY = ('ri', 'rd', 'cas', 'cst', 'stage', 'alloc', 'force')
ENV_OPS = ('loss', 'activate')


def mstat(r):
    return (r[FL] >> MS) & 3


def set_mstat(r, s):
    return r[:FL] + ((r[FL] & ~(3 << MS)) | (s << MS),) + r[FL + 1:]


# ================================================================ client side
def sync(x, s, frm, to):
    """RP2: bring the mirror of ITE slot s up to date after winning frm -> to
    on the primary.  Mutants m2 and m3 are the two rejected designs."""
    m = x.m
    if m.m2:                                    # stop once the primary moved on
        if x.ri(s) != to:
            return
    if m.m3:                                    # sync from a value read first
        p = x.ri(s)
        found = x.mcas(s, frm, to)
        found = to if found == frm else found
        while found != to and found != p:
            got = x.mcas(s, found, p)
            if got == found:
                return
            found = got
        return
    found = x.mcas(s, frm, to)
    found = to if found == frm else found       # the common case: done
    while found != to:
        p = x.ri(s)                             # read after `found` was seen
        if found == p:
            return
        got = x.mcas(s, found, p)
        if got == found:                        # p was read after `to`: done
            return
        found = got


_Ctx, _World = mc.Ctx, mc.World


class RCtx(_Ctx):
    """The shared Ctx with the mirror verbs, the pending syncs, and the
    failure of primary verbs after the loss ('TO' results)."""

    def __init__(self, *a):
        _Ctx.__init__(self, *a)
        self.pending = []
        self.sync_failed = False
        self.aborted = set()                    # mirror statuses known ABORTED

    @staticmethod
    def _chk(r):
        if r == 'TO':
            raise mc.OpTimeout()
        return r

    def ri(self, s):
        return self._chk(self._real(('ri', s)))

    def rd(self, v, linked=True):
        r = self._chk(self._real(('rd', v, linked)))
        return None if r is None else mc.View(*r)

    def alloc(self, rec):
        return self._chk(self._real(('alloc', rec)))

    def cas(self, s, exp, new):
        r = _Ctx.cas(self, s, exp, new)
        if r == exp:
            self.pending.append((s, exp, new))
        return r

    def has_mirror(self):
        return self._instant(lambda: self.w.has_mirror(self.c))

    def mcas(self, s, exp, new):
        return self._chk(self._real(('mcas', s, exp, new)))

    def mcst(self, at, to, frm=INV):
        return self._chk(self._real(('mcst', at, to, frm)))

    def mirror_abort(self, at):
        """fix AB: the mirror status is ABORTED before anything is restored"""
        if at in self.aborted or not self.has_mirror():
            return
        if self.mcst(at, ABT) == VAL:
            self.mcst(at, ABT, VAL)
        self.aborted.add(at)

    def flush(self):
        """Run the syncs of every ITE CAS won so far, in order."""
        if self.sync_failed:
            raise mc.OpTimeout()
        if self.pending and not self.has_mirror():
            self.pending = []
        while self.pending:
            try:
                sync(self, *self.pending[0])
            except mc.OpTimeout:
                self.sync_failed = True
                raise
            self.pending.pop(0)

    def cst(self, at, to):
        m = self.m
        if not (m.m4 and to == VAL):
            self.flush()                        # RP4
        if to == VAL and not m.m1:              # RP3: mirrors commit first
            if self.has_mirror():
                self.mcst(at, VAL)
            return _Ctx.cst(self, at, to)
        r = _Ctx.cst(self, at, to)            # abort (or m1): primary first
        if to == ABT and m.ab:
            if r != VAL:
                self.mirror_abort(at)
        elif r == INV and self.has_mirror():
            self.mcst(at, to)                   # best effort
        return r

    def stage(self, at):
        if not self.m.m5:
            try:
                self.flush()                    # RP5
            except mc.OpTimeout:
                return 0                        # not staged: a counted leak
        mask = self._instant(lambda: self.w.running())
        return self._chk(self._real(('stage', at, mask)))


_shared_run_op = mc.run_op
_shared_restore = mc.restore


def help_dead_copy(x, dest, copy_ite, copy):
    """help.rs help_dead_copy; with fix RF the roll-forward first syncs the
    dead owner's two links (destination, source marker) to the mirror, as
    RP4 makes the owner do before its own commit."""
    marker = mc.moved_of(copy.at)
    if x.ri(copy.src) == marker:
        if x.m.rf:
            if dest is not None:
                x.pending.append((dest, copy.rep, mc.occ_of(copy.at)))
            x.pending.append((copy.src, copy.prev, marker))
        if x.cst(copy.at, VAL) != ABT:
            mc.clear_marker(x, copy.src, marker, copy)
        return
    if x.cst(copy.at, ABT) == VAL:
        return
    if dest is None:
        dest = mc.find_holder(x, copy.key, copy_ite)
    if dest is not None:
        mc.restore(x, dest, copy_ite, copy)


def restore(x, slot, ite, view):
    if x.m.ab:
        x.mirror_abort(view.at)
    return _shared_restore(x, slot, ite, view)


def run_op(x, op):
    if op[0] in ENV_OPS:
        x._real((op[0],))
        return mc.DONE(mc.R_TO)
    res = _shared_run_op(x, op)
    try:
        x.flush()                               # RP2: every win is synced
    except mc.OpTimeout:
        if res == mc.RETRY:
            raise
    return res


_shared_fmt_op = mc.fmt_op


def fmt_op(op):
    return op[0].upper() if op[0] in ENV_OPS else _shared_fmt_op(op)


# ================================================================ world
class RWorld(_World):
    def phase(self):
        return self.ites[2 * self.m.S]

    def old(self):
        return self.ites[2 * self.m.S + 1]

    def has_mirror(self, c):
        return self.phase() != 2 or bool((self.old() >> c) & 1)

    def dead(self, own):
        if own < 0:
            return True
        if self.m.dl and (self.crashed >> (ARM + own % 8)) & 1:
            return False        # fix DL: a CAS it armed may still land
        return _World.dead(self, own)

    def recycle_check(self, p, pairs):
        S = self.m.S
        before = self.ites[:S]
        _World.recycle_check(self, p, pairs)
        if self.phase() == 0:
            # the recycler's marker CAS is a primary win too (RP2); it reuses
            # the slot only after its sync returned: modelled as one step
            for s in range(S):
                if self.ites[s] != before[s]:
                    self.ites[S + s] = self.ites[s]

    def after(self):
        if not self.m.early or self.viol:
            return
        S = self.m.S
        for s in range(S):
            v = self.ites[S + s]
            if mc.is_occ(v) or mc.is_moved(v):
                r = self.slots[mc.vslot(v)]
                if not r[U] or r[G] != mc.vgen(v):
                    self.flag('DANGLING-MIRROR: mirror of s%d holds %s but slot d%d was reused' % (
                        s, self.m.dn(v), mc.vslot(v)))
                    return
        _World.after(self)


def check_inv(model, st):
    S = model.S
    return _shared_check_inv(model, (st[0][:S],) + tuple(st[1:]))


_shared_check_inv = mc.check_inv


def show_state(model, st):
    S = model.S
    ites, slots = st[0], st[1]
    ph = ('before loss', 'P lost', 'M active', 'N restoring', 'M lost', 'N active')[ites[2 * S]]
    out = ['[%s]' % ph, 'ITEs: ' + ' '.join('s%d=%s' % (i, model.dn(v)) for i, v in enumerate(ites[:S]))]
    if ites[2 * S] in (0, 1, 3):
        out.append('mirror: ' + ' '.join('s%d=%s' % (i, model.dn(v)) for i, v in enumerate(ites[S:2 * S])))
    out[-1] += ';'
    for p, r in enumerate(slots):
        if r[U]:
            out.append(model.fmt_rec(p, r))
    return out


mc.Ctx = RCtx
mc.World = RWorld
mc.run_op = run_op
mc.restore = restore
mc.help_dead_copy = help_dead_copy
mc.fmt_op = fmt_op
mc.check_inv = check_inv
mc.show_state = show_state


# ================================================================ model
class RModel(mc.Model):
    m1 = m2 = m3 = m4 = m5 = m6 = False
    dl = ab = rf = grace = False

    def __init__(self, nslots, keys, scripts, on_p, **kw):
        mc.Model.__init__(self, nslots, keys, list(scripts) + [[('loss',), ('activate',)]], **kw)
        self.E = self.N - 2                     # the environment
        self.on_p = set(on_p)

    def initial(self):
        st = mc.Model.initial(self)
        ites, slots = st[0], st[1]
        slots = tuple(set_mstat(r, VAL) if r[U] else r for r in slots)
        return self.canon(tuple(ites) + tuple(ites) + (0, 0), slots, st[2], st[3], st[4])

    def apply(self, m, op):
        if op[0] in ENV_OPS:
            return tuple(m), mc.R_TO
        return mc.Model.apply(self, m, op)

    def fmt_view(self, v):
        return mc.Model.fmt_view(self, v).replace('owner=c7/op-1', 'owner=unknown')

    def fmt_rec(self, p, r):
        s = mc.Model.fmt_rec(self, p, set_mstat(r, 0))
        if r[U]:
            s = s[:-1] + ' mirror:%s}' % mc.SN[mstat(r)]
        return s

    def respond(self, w, c, result):
        mc.Model.respond(self, w, c, result)
        i = 2 * self.S + 1
        w.ites[i] &= ~(1 << c)

    def step(self, st, c, log=None):
        # between the loss and the activation a new op gets ViewChanging:
        # modelled as not starting until the activation
        if st[0][2 * self.S] == 1 and st[2][c][1] == 0 and c != self.E:
            return []
        return mc.Model.step(self, st, c, log)

    def crash(self, st, c):
        ites, slots, clients, crashed, lin = mc.Model.crash(self, st, c)
        i = 2 * self.S + 1
        ites = ites[:i] + (ites[i] & ~(1 << c),)
        return (ites, slots, clients, crashed, lin)

    def expire(self, st, c):
        """the shared zombie event; a mirror CAS can be the armed one too"""
        out = mc.Model.expire(self, st, c)
        if len(out) == 1 and st[2][c][1] == 1:
            w, hist, act, end = self.probe(st, c)
            if act is not None and act[0] in ('mcas', 'mcst'):
                cl = list(w.clients)
                cl[c] = (cl[c][0], 1, cl[c][2], hist)
                nexp = st[3] >> mc.NEXP
                base = (st[3] & ~(0xFF << mc.NEXP)) | ((nexp + 1) << mc.NEXP) | (1 << (EXP + c))
                out.append(self.canon(w.ites, w.slots, cl, base | (1 << (ARM + c)), w.lin))
        return out

    # ------------------------------------------------------------ verbs
    def perform(self, w, c, act):
        k = act[0]
        S = self.S
        ph, old = w.ites[2 * S], w.ites[2 * S + 1]
        if k == 'loss':
            return self.do_loss(w)
        if k == 'activate':
            return self.do_activate(w)
        if k in PRIMARY and ph >= 1 and (old >> c) & 1:
            w.log is not None and w.say('%s on P: host lost, verb fails' % k)
            return [('TO', w)]
        if k in ('mcas', 'mcst'):
            if w.expired(c):
                if (w.crashed >> (ARM + c)) & 1:
                    w.crashed &= ~(1 << (ARM + c))
                    w.log is not None and w.say('(late mirror CAS: its deadline check passed before)')
                else:
                    w.log is not None and w.say('deadline check fails before mirror CAS: Timeout')
                    return [('TO', w)]
            where = 'the promoted ' if ph == 2 else 'mirror '
            if k == 'mcas':
                s, exp, new = act[1], act[2], act[3]
                i = s if ph == 2 else S + s
                found = w.ites[i]
                if found == exp:
                    w.ites[i] = new
                w.log is not None and w.say('CAS %ss%d %s -> %s %s' % (
                    where, s, self.dn(exp), self.dn(new),
                    'ok' if found == exp else 'FAILED (is %s)' % self.dn(found)))
                return [(found, w)]
            at, to, frm = act[1], act[2], act[3]
            p = mc.vslot(at)
            r = w.slots[p]
            if not r[U] or r[G] != mc.vgen(at):
                if self.early:
                    w.flag('STALE-STATE-CAS: %sstatus CAS on %s, whose slot was reused' % (where, self.dn(at)))
                return [(ABT, w)]
            found = r[ST] if ph == 2 else mstat(r)
            if found == frm:
                w.slots[p] = r[:ST] + (to,) + r[ST + 1:] if ph == 2 else set_mstat(r, to)
            w.log is not None and w.say('CAS %sstatus of %s %s -> %s %s' % (
                where, self.dn(at), mc.SN[frm], mc.SN[to],
                'ok' if found == frm else 'FAILED (is %s)' % mc.SN[found]))
            return [(found, w)]
        out = mc.Model.perform(self, w, c, act)
        if k == 'rd':
            out = [(res if res is None else res[:3] + (res[3] & 3,) + res[4:], w2) for res, w2 in out]
        return out

    def do_loss(self, w):
        S = self.S
        w.ites[2 * S] = 1
        old = 0
        was_exp = w.crashed     # an op already past its deadline arms nothing now
        for c in range(self.E):
            opi, phase, first, hist = w.clients[c]
            if (w.crashed >> c) & 1 or self.done(c, w.clients):
                continue
            if c in self.on_p:
                w.crashed = (w.crashed | (1 << c)) & ~((1 << (EXP + c)) | (1 << (ARM + c)))
                if phase == 1:
                    w.clients[c] = (opi, 1, 0, ())
                self.clear_bit(w, c)
            elif phase == 1:
                old |= 1 << c
                if not (self.m6 or self.grace):
                    w.crashed |= 1 << (EXP + c)
        w.ites[2 * S + 1] = old
        w.log is not None and w.say('LOSS of P: its clients crash, its memory is gone%s' % (
            '' if self.m6 else '; running ops of M are past their deadline'))
        # a mirror CAS whose deadline check passed before the loss may land
        armable = []
        if not (self.m6 or self.grace):
            st = (tuple(w.ites), tuple(w.slots), tuple(w.clients), w.crashed, w.lin)
            for c in range(self.E):
                if (old >> c) & 1 and not (was_exp >> (EXP + c)) & 1:
                    wp, hist, a, end = self.probe(st, c)
                    if a is not None and a[0] in ('mcas', 'mcst'):
                        armable.append((c, hist))
        outs = []
        for choice in itertools.product((0, 1), repeat=len(armable)):
            w2 = w.clone() if len(armable) else w
            for (c, hist), armed in zip(armable, choice):
                if armed:
                    cl = w2.clients[c]
                    w2.clients[c] = (cl[0], 1, cl[2], hist)
                    w2.crashed |= 1 << (ARM + c)
                    w2.log is not None and w2.say('c%d had armed its mirror CAS' % c)
            outs.append((0, w2))
        return outs

    def do_activate(self, w):
        S = self.S
        old = w.ites[2 * S + 1]
        running = [c for c in range(self.E) if (old >> c) & 1 and w.clients[c][1] == 1
                   and not (w.crashed >> c) & 1]
        if running and not self.m6:
            return []                           # RP0: drain first
        w.ites[:S] = w.ites[S:2 * S]
        w.ites[S:2 * S] = [0] * S
        w.ites[2 * S] = 2
        w.ites[2 * S + 1] = old if self.m6 else 0
        for p, r in enumerate(w.slots):
            if r[U]:
                w.slots[p] = set_mstat(r[:ST] + (mstat(r),) + r[ST + 1:], 0)
        w.log is not None and w.say('ACTIVATE: the mirror on M is the primary%s' % (
            ' (old ops of M still running: %s)' % running if running else ''))
        return [(0, w)]


# ================================================================ configurations
K1 = {1: (0, 1)}
K1_INIT = {0: (1, 1)}
LA_KEYS = {1: (1, 0), 2: (0, 2), 3: (2, 1)}
LA_INIT = {0: (1, 1), 2: (3, 3)}

# name: (ITE slots, keys, init, scripts, clients on P, model options, what)
CONFIGS = {
    'a': (2, K1, K1_INIT, [[('put', 1, 5)], [('get', 1)]], {0},
          dict(ndte=3, max_zombies=1), 'PUT(k1) on P overwrites, GET(k1) on M'),
    'a2': (2, K1, K1_INIT, [[('get', 1)], [('put', 1, 5)]], {0},
           dict(ndte=3, max_zombies=1), 'GET(k1) on P, PUT(k1) overwrite on M'),
    'a3': (2, K1, K1_INIT, [[('put', 1, 5)], [('get', 1)], [('get', 1)]], {0},
           dict(ndte=3, max_zombies=1), 'PUT(k1) on P, two GETs on M'),
    'b': (2, K1, K1_INIT, [[('put', 1, 5)], [('del', 1)]], {0},
          dict(ndte=3, max_zombies=1), 'PUT(k1) on P, DELETE(k1) on M, zombie'),
    'b2': (2, K1, K1_INIT, [[('del', 1)], [('put', 1, 5)]], {0},
           dict(ndte=3, max_zombies=1), 'DELETE(k1) on P, PUT(k1) on M, zombie'),
    'c': (3, LA_KEYS, LA_INIT, [[('put', 2, 4)], [('get', 1)]], {0},
          dict(ndte=3, max_zombies=1), 'PUT(k2) on P needs a MIGRATE, GET(k1) on M'),
    'c2': (3, LA_KEYS, LA_INIT, [[('get', 1)], [('put', 2, 4)]], {0},
           dict(ndte=3, max_zombies=1), 'MIGRATE by a PUT(k2) on M, GET(k1) on P'),
    'd': (2, K1, K1_INIT, [[('put', 1, 5)], [('put', 1, 6)]], {0},
          dict(ndte=4, max_crashes=1), 'PUT(k1) on P and on M, a crash before the loss'),
    'b3': (2, K1, K1_INIT, [[('del', 1), ('get', 1)], [('put', 1, 5)]], {1},
           dict(ndte=3, max_zombies=1), 'DELETE then GET of k1 on M, PUT(k1) on P'),
    'e': (2, K1, K1_INIT, [[('put', 1, 5)], [('get', 1)], [('put', 1, 6)]], {0},
          dict(ndte=4, max_zombies=1), 'PUT(k1) on P, GET and PUT(k1) on M'),
    'f': (3, LA_KEYS, LA_INIT, [[('put', 2, 4)], [('get', 1)]], {0},
          dict(ndte=3, max_zombies=1, max_crashes=1), 'c with a crash as well'),
    'g': (3, LA_KEYS, LA_INIT, [[('put', 2, 4)], [('put', 1, 5)]], {0},
          dict(ndte=4, max_zombies=1), 'MIGRATE by PUT(k2) on P racing PUT(k1) on M'),
    'h': (2, K1, K1_INIT, [[('put', 1, 5), ('del', 1)], [('put', 1, 6), ('get', 1)]], {0},
          dict(ndte=3, max_zombies=1), 'two ops each on P and M, slots reused before the loss'),
    'h2': (2, K1, K1_INIT, [[('put', 1, 5), ('del', 1)], [('put', 1, 6), ('get', 1)]], {1},
           dict(ndte=3, max_zombies=1), 'h with the roles of the nodes swapped'),
}

FLAGS = ('m1', 'm2', 'm3', 'm4', 'm5', 'm6')
FIX = ('dl', 'ab', 'rf')
VARIANTS = {
    'rp': (),                       # the design as written: fails (flaws 1-3)
    'fix': FIX,                     # with the three fixes
    'grace': FIX + ('grace',),      # ... and old ops of M not stopped by the loss
    'no-dl': ('ab', 'rf'),          # each fix removed in turn
    'no-ab': ('dl', 'rf'),
    'no-rf': ('dl', 'ab'),
}
VARIANTS.update({f: FIX + (f,) for f in FLAGS})
CLEAN = ('fix', 'grace')
DESCR = {
    'rp': 'the design as written, RP0-RP6',
    'fix': 'RP0-RP6 with fixes DL, AB, RF',
    'grace': 'fix, and M\'s old ops keep going after the loss until a verb to P',
    'no-dl': 'fix without DL',
    'no-ab': 'fix without AB',
    'no-rf': 'fix without RF',
    'm1': 'commit CASes the primary first (RP3 reversed)',
    'm2': 'sync returns once the primary no longer holds its value',
    'm3': 'sync CASes the mirror to a primary value read before the CAS',
    'm4': 'commit without waiting for the syncs (RP4 off)',
    'm5': 'stage before the unlink\'s sync returned (RP5 off)',
    'm6': 'activation without the drain (RP0 off)',
}


def build(cname, vname):
    ns, keys, init, scripts, on_p, opts, _ = CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = rules.VARIANTS['rs']
    kw.update(model_kw)
    m = RModel(ns, keys, scripts, on_p, init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    for f in VARIANTS[vname]:
        setattr(m, f, True)
    return m


def run(cname, vname, max_states, time_limit):
    m = build(cname, vname)
    r = mc.explore(m, name='%s [%s]' % (cname, vname), max_states=max_states,
                   time_limit=time_limit, liveness=True)
    buf = io.StringIO()
    mc.report(m, r, out=buf, maxlines=200)
    return r, buf.getvalue()


def main(argv):
    vs = list(VARIANTS) if len(argv) < 2 or argv[1] == 'all' else argv[1].split(',')
    cs = list(CONFIGS) if len(argv) < 3 or argv[2] == 'all' else argv[2].split(',')
    max_states = int(argv[3]) if len(argv) > 3 else 3_000_000
    time_limit = float(argv[4]) if len(argv) > 4 else 600
    bad = []
    rows = []
    for v in vs:
        caught = []
        for c in cs:
            t0 = time.time()
            r, text = run(c, v, max_states, time_limit)
            print(text, flush=True)
            viol = bool(r['violations'])
            rows.append((c, v, r['states'], 'limit' if r['limit'] else ('VIOLATION' if viol else 'clean'),
                         time.time() - t0))
            if viol:
                caught.append(c)
            if v in CLEAN and (viol or r['limit']):
                bad.append('%s fails %s' % (v, c))
        if v not in CLEAN and not caught:
            bad.append('%s (expected to fail) shows no counterexample' % v)
    print('%-5s %-4s %10s %-10s %8s' % ('cfg', 'var', 'states', 'result', 'seconds'))
    for row in rows:
        print('%-5s %-4s %10d %-10s %8.1f' % row)
    for b in bad:
        print('FAIL: ' + b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
