#!/usr/bin/env python3
"""The switch back after a restore (docs/replication.md, "Restore" steps 4-5
and RP3c), on top of replicas_restore.py: after N has copied its share
while M's clients wrote, N becomes the primary of its share again and M its
mirror, both alive; then N is lost in turn and M is activated once more; the
audit must still hold.

Phases (ites[2S]): 0-3 as in replicas_restore.py; 6 switched (N primary, M
its mirror); 7 N lost; 8 M active again.  Environment script: LOSS,
ACTIVATE, JOIN, SWITCH, LOSS3, ACTIVATE3.
  SWITCH     enabled when the restorer is done and no op is running (the
             drain of the view change).  N's ITEs and status words become
             the primary's, M's the mirror's.  Every used slot must have its
             image on N by then (MISSING-IMAGE otherwise).
  CATCH-UP   (variant `catchup`, RP3c) a pass of its own on N, enabled from
             the switch on, while the clients go on: for every DTE slot,
             READ N's state word; if it is VALID, CAS M's word from INVALID
             of the same generation to VALID.  N's VALID over M's ABORTED is
             flagged (the debug_assert of replica::restore::catch_up).
  LOSS3      enabled once the catch-up pass has returned (the doc: another
             loss is within the guarantee only after it); every client not
             done crashes (as at LOSS2), N's memory is gone.
  ACTIVATE3  M's ITEs and status words become the primary's; no mirror.
The recycler's marker CAS is synced to the mirror in the same step while a
mirror exists (phases 0, 3 and 6).

Every variant carries the three steady-state fixes and the three restore
fixes (DL, AB, RF, ZS, CV, CM: replicas_restore.py's clean variant).

usage: python3 replicas_switch.py [VARIANTS|all] [CONFIGS|all] [max_states] [time_limit_s]
  'catchup' must be clean (exhaustive) in every configuration; 'switch'
  (no catch-up) and 'nowait' (N's loss may come before the catch-up pass
  returned) must each show a counterexample in some configuration (exit
  status 1 otherwise).
"""
import sys

import replicas as R
import replicas_restore as RR
from replicas import mc, mstat, set_mstat

U, G, FL, ST = mc.U, mc.G, mc.FL, mc.ST
IMG = RR.IMG
SWITCHED, LOST3, ACTIVE3 = 6, 7, 8
SW_OPS = ('switch', 'loss3', 'activate3')
PHASES = ('before loss', 'P lost', 'M active', 'N restoring', 'M lost', 'N active',
          'N primary again, M its mirror', 'N lost', 'M active again')


def op_catchup(x):
    """replica::restore::catch_up, one slot at a time"""
    for p in range(x.m.P):
        seen = x._real(('cu_read', p))
        if seen is not None:
            x._real(('cu_cas', p, seen))
    return mc.DONE(mc.R_TO)


_run_op = mc.run_op


def run_op(x, op):
    if op[0] in SW_OPS:
        x._real((op[0],))
        return mc.DONE(mc.R_TO)
    if op[0] == 'catchup':
        return op_catchup(x)
    return _run_op(x, op)


mc.run_op = run_op
_fmt_op = mc.fmt_op
mc.fmt_op = lambda op: op[0].upper() if op[0] in SW_OPS + ('catchup',) else _fmt_op(op)


class SModel(RR.RRModel):
    catchup = False
    nowait = False          # mutant: LOSS3 does not wait for the catch-up pass

    def __init__(self, nslots, keys, scripts, on_p, catchup, **kw):
        mc.Model.__init__(self, nslots, keys, list(scripts) + [
            [('restore',)], [('catchup',)] if catchup else [],
            [('loss',), ('activate',), ('join',), ('switch',), ('loss3',), ('activate3',)]], **kw)
        self.catchup = catchup
        self.E = self.N - 2                     # the environment
        self.CU = self.N - 3                    # the catch-up pass, on N
        self.RS = self.N - 4                    # the restorer, on N
        self.on_p = set(on_p)

    def apply(self, m, op):
        if op[0] in SW_OPS + ('catchup',):
            return tuple(m), mc.R_TO
        return RR.RRModel.apply(self, m, op)

    def step(self, st, c, log=None):
        ph = st[0][2 * self.S]
        if c == self.RS and ph != 3:
            return []                           # the restorer runs while N restores
        if c == self.CU and ph != SWITCHED:
            return []                           # the catch-up runs once N is primary
        if ph >= LOST3 and c < self.RS:
            return []
        return R.RModel.step(self, st, c, log)

    def expire(self, st, c):
        return [] if c in (self.RS, self.CU) else RR.RRModel.expire(self, st, c)

    def crash(self, st, c):
        return st if c in (self.RS, self.CU) else RR.RRModel.crash(self, st, c)

    def user_running(self, w):
        return [d for d in range(self.RS) if w.clients[d][1] == 1 and not (w.crashed >> d) & 1]

    def perform(self, w, c, act):
        k = act[0]
        S = self.S
        if k == 'switch':
            if w.ites[2 * S] != 3 or not self.done(self.RS, w.clients) or self.user_running(w):
                return []                       # after the copy, and the drain
            w.ites[:S], w.ites[S:2 * S] = w.ites[S:2 * S], w.ites[:S]
            w.ites[2 * S] = SWITCHED
            for p, r in enumerate(w.slots):
                if not r[U]:
                    continue
                if not RR.has_img(r):
                    w.flag('MISSING-IMAGE: slot d%d is in use but N has no image of it at the switch' % p)
                r = r[:FL] + (r[FL] & ~IMG,) + r[FL + 1:]
                w.slots[p] = set_mstat(r[:ST] + (mstat(r),) + r[ST + 1:], r[ST])
            w.log is not None and w.say('SWITCH: N is the primary again, M its mirror')
            return [(0, w)]
        if k == 'loss3':
            if w.ites[2 * S] != SWITCHED or not (self.nowait or self.done(self.CU, w.clients)):
                return []
            w.ites[2 * S] = LOST3
            if not self.done(self.CU, w.clients):
                w.crashed |= 1 << self.CU           # the pass was on N
            for d in range(self.RS):
                if not self.done(d, w.clients) and not (w.crashed >> d) & 1:
                    w.crashed = (w.crashed | (1 << d)) & ~((1 << (mc.EXP + d)) | (1 << (mc.ARM + d)))
                    if w.clients[d][1] == 1:
                        w.clients[d] = (w.clients[d][0], 1, 0, ())
                    self.clear_bit(w, d)
            w.log is not None and w.say('LOSS3 of N: its clients crash, its memory is gone')
            return [(0, w)]
        if k == 'activate3':
            w.ites[:S] = w.ites[S:2 * S]
            w.ites[S:2 * S] = [0] * S
            w.ites[2 * S] = ACTIVE3
            for p, r in enumerate(w.slots):
                if r[U]:
                    w.slots[p] = set_mstat(r[:ST] + (mstat(r),) + r[ST + 1:], 0)
            w.log is not None and w.say('ACTIVATE3: M is the primary again')
            return [(0, w)]
        if k == 'cu_read':
            r = w.slots[act[1]]
            seen = (r[G], r[ST]) if r[U] else None
            w.log is not None and w.say('catch-up READ N\'s d%d: %s' % (
                act[1], mc.SN[r[ST]] if r[U] else 'free'))
            return [(seen if seen is not None and seen[1] == mc.VAL else None, w)]
        if k == 'cu_cas':
            p, (g, _) = act[1], act[2]
            r = w.slots[p]
            if r[U] and r[G] == g and mstat(r) == mc.ABT:
                w.flag('CATCH-UP-ABORTED: d%d is VALID on N and ABORTED on M' % p)
            ok = r[U] and r[G] == g and mstat(r) == mc.INV
            if ok:
                w.slots[p] = set_mstat(r, mc.VAL)
            w.log is not None and w.say('catch-up CAS M\'s d%d.%d INVALID -> VALID %s' % (
                p, g, 'ok' if ok else 'FAILED (is %s)' % (
                    mc.SN[mstat(r)] if r[U] and r[G] == g else 'reused')))
            return [(0, w)]
        return RR.RRModel.perform(self, w, c, act)


class SWorld(RR.RRWorld):
    def running(self):
        # the catch-up pass has no deadline either
        return tuple(cr for cr in RR.RRWorld.running(self) if cr[0] != self.m.CU)

    def has_mirror(self, c):
        ph = self.phase()
        if ph >= 3:
            return ph in (3, SWITCHED)
        return R.RWorld.has_mirror(self, c)

    def recycle_check(self, p, pairs):
        S = self.m.S
        before = self.ites[:S]
        R.RWorld.recycle_check(self, p, pairs)
        if self.phase() in (3, SWITCHED):
            # as in phase 0: the recycler's marker CAS is synced in its step
            for s in range(S):
                if self.ites[s] != before[s]:
                    self.ites[S + s] = self.ites[s]


mc.World = SWorld


def show_state(model, st):
    S = model.S
    ites, slots = st[0], st[1]
    ph = ites[2 * S]
    out = ['[%s]' % PHASES[ph], 'ITEs: ' + ' '.join('s%d=%s' % (i, model.dn(v)) for i, v in enumerate(ites[:S]))]
    if ph in (0, 1, 3, SWITCHED):
        out.append('mirror: ' + ' '.join('s%d=%s' % (i, model.dn(v)) for i, v in enumerate(ites[S:2 * S])))
    out[-1] += ';'
    for p, r in enumerate(slots):
        if r[U]:
            out.append(model.fmt_rec(p, r))
    return out


mc.show_state = show_state

LA_KEYS, LA_INIT = R.LA_KEYS, R.LA_INIT
CONFIGS = {
    # R3: c0's PUT(k2) on P migrates k1 (s0 -> s1) and dies with P; during
    # the restore c1's GET(k1) rolls the dead copy forward (a zombie: cut
    # short between N's commit and M's); after the switch c1's PUT(k2)
    # clears the copy's marker and stages k1's old entry
    's1': (3, LA_KEYS, LA_INIT, [[('put', 2, 4)], [('get', 1), ('put', 2, 5)]], {0},
           dict(ndte=4, max_zombies=1),
           'PUT(k2) with MIGRATE on P; GET(k1), PUT(k2) on M'),
    # the restore model's configurations, now with the switch back
    'r1': RR.CONFIGS['r1'],
    'r2': RR.CONFIGS['r2'],
}
VARIANTS = {
    'switch': dict(catchup=False),              # the switch back without the catch-up
    'catchup': dict(catchup=True),              # with RP3c
    'nowait': dict(catchup=True, nowait=True),  # RP3c, but N's loss may cut its pass short
}
CLEAN = 'catchup'
FLAGS = RR.VARIANTS[RR.CLEAN]


def build(cname, vname):
    ns, keys, init, scripts, on_p, opts, _ = CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = R.rules.VARIANTS['rs']
    kw.update(model_kw)
    m = SModel(ns, keys, scripts, on_p, VARIANTS[vname]['catchup'], init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    for f in FLAGS:
        setattr(m, f, True)
    m.nowait = VARIANTS[vname].get('nowait', False)
    return m


def main(argv):
    return RR.main(argv, VARIANTS, CONFIGS, build, CLEAN)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
