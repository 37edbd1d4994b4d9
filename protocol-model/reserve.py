#!/usr/bin/env python3
"""The tombstone reserve, checked with the shared recycling model.

A DELETE needs a data slot for its tombstone before it can unlink anything,
so a node whose tables hold nothing but live entries could never be emptied:
every DELETE would fail for want of a slot (docs/design.md#the-tombstone-
reserve).  The rule checked here: the last `reserve` obtainable slots of the
tombstones' size class are for DELETEs only.  A PUT or a MIGRATE copy takes a
slot only while more than `reserve` slots are obtainable (free, or staged and
reusable); a DELETE takes any.

This file builds on rules.py (the implementation's own client functions on
top of mc_recycle.py) and swaps the model's allocation for one that keeps
the reserve.  Besides every check of the shared model (linearizability, the
audit that reuses every staged slot, leaks in final states, liveness), it
flags

  DELETE-FULL    a DELETE of a live key found no slot for its tombstone.

Each configuration's reserve covers every tombstone its scripts can hold
at once: a DELETE attempt in progress, a linked tombstone, or one staged
and not yet reusable, an aborted attempt's included.  'R4-2' gives R4 one
slot less and finds the schedule in which an aborted attempt's tombstone,
held by a zombie's reuse window, takes the last one: the reserve must cover
tombstone *allocations* per reuse window, retries included, not DELETEs.

usage: python3 reserve.py [VARIANTS] [CONFIGS] [max_states] [time_limit_s]
  VARIANTS: 'reserve' (the rule), 'no-reserve' (the old allocator: shows
  DELETE-FULL), comma-separated; CONFIGS: names of CONFIGS below, or 'all'.
"""
import io
import sys

import rules  # noqa: F401  (installs the implementation's op_get / op_write)
from rules import mc

# Index layout of three slots; k1 and k2 fill the two data slots outside the
# reserve.  k3 is absent.
KEYS = {1: (0, 1), 2: (1, 2), 3: (2, 0)}
FULL = {0: (1, 1), 1: (2, 2)}

# name: (ITE slots, keys, init, scripts, model options, reserve)
CONFIGS = {
    # Full: a new key does not fit, the DELETE of a live key does, and the
    # refill after it may (once the freed slots are reusable).
    'R1': (3, KEYS, FULL,
           [[('put', 3, 7), ('del', 1), ('put', 1, 5)], [('get', 1), ('put', 2, 6)]],
           dict(ndte=3, max_zombies=1), 1),
    # Two DELETEs at once against a reserve of two, one deleter may crash
    # (its tombstone comes back through the helpers and the audit).
    'R2': (3, KEYS, FULL,
           [[('del', 1), ('put', 3, 7)], [('del', 2), ('put', 1, 5)]],
           dict(ndte=4, max_crashes=1), 2),
    # A DELETE racing an overwrite of the same key and a GET, zombies on.
    'R3': (3, KEYS, FULL,
           [[('put', 1, 5), ('del', 1)], [('del', 1), ('get', 1)]],
           dict(ndte=4, max_zombies=1), 2),
    # An absent key whose insert needs a MIGRATE at full occupancy: the copy
    # must not take the reserve, and the DELETEs beside it still succeed.
    'R4': (4, {1: (0, 3), 2: (1, 2), 3: (0, 1)}, FULL,
           [[('put', 3, 7)], [('del', 2), ('del', 1)]],
           dict(ndte=5, max_zombies=1), 3),
    'R4-2': (4, {1: (0, 3), 2: (1, 2), 3: (0, 1)}, FULL,
             [[('put', 3, 7)], [('del', 2), ('del', 1)]],
             dict(ndte=4, max_zombies=1), 2),
}


class ReserveModel(mc.Model):
    """mc.Model whose allocation keeps `reserve` slots for tombstones."""

    reserve = 0
    keep_reserve = True

    def perform(self, w, c, act):
        if act[0] != 'alloc':
            return mc.Model.perform(self, w, c, act)
        tomb = bool(act[1][2] & mc.TOMB)
        frees = [p for p in range(self.P) if not w.slots[p][mc.U]]
        reus = [p for p in range(self.P) if w.reusable(p)]
        if tomb and not frees and not reus:
            w.flag('DELETE-FULL: c%d found no slot for its tombstone' % c)
        if tomb or not self.keep_reserve or len(frees) > self.reserve:
            return mc.Model.perform(self, w, c, act)
        if len(frees) + len(reus) <= self.reserve:
            w.log is not None and w.say('allocate: only the reserve is left (DataTableFull)')
            return [(None, w)]
        # As the allocator does: a scan turns expired slots into free ones,
        # and the write takes one of them, which keeps the reserve.
        hide = lambda w, used: [w.setf(q, used=used) for q in frees]  # noqa: E731
        hide(w, 2)         # neither free nor reusable
        out = mc.Model.perform(self, w, c, act)
        for _, w2 in out:
            hide(w2, 0)
        return out


VARIANTS = {
    'reserve': dict(keep_reserve=True),
    'no-reserve': dict(keep_reserve=False),
}


def run(cname, vname, max_states, time_limit):
    ns, keys, init, scripts, opts, reserve = CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = rules.VARIANTS['rs']
    kw.update(model_kw)
    m = ReserveModel(ns, keys, scripts, init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    m.reserve = reserve
    for name, value in VARIANTS[vname].items():
        setattr(m, name, value)
    r = mc.explore(m, name='%s [%s, reserve %d]' % (cname, vname, reserve),
                   max_states=max_states, time_limit=time_limit, liveness=True)
    buf = io.StringIO()
    mc.report(m, r, out=buf)
    return buf.getvalue()


if __name__ == '__main__':
    vs = sys.argv[1].split(',') if len(sys.argv) > 1 else ['reserve']
    cs = list(CONFIGS) if len(sys.argv) < 3 or sys.argv[2] == 'all' else sys.argv[2].split(',')
    max_states = int(sys.argv[3]) if len(sys.argv) > 3 else 3_000_000
    time_limit = float(sys.argv[4]) if len(sys.argv) > 4 else 1200
    for c in cs:
        for v in vs:
            print(run(c, v, max_states, time_limit), flush=True)
