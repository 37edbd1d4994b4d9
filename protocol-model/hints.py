#!/usr/bin/env python3
"""GETs and writes that read a hinted entry in the same round trip as the
index.

A client remembers, per key, the ITE value its last GET or write of the key
saw linked (a *location hint*).  The next GET of the key reads that entry in
the same batch as the candidates' ITEs, so the entry may be read *before*
the index.  It answers from that read only if the entry is a committed
entry of the key and one of the ITEs read in the batch holds the hinted
value; otherwise the pass goes on as a GET without a hint
(docs/design.md#location-hints).

The model: a GET's first pass chooses as its hint none, or any occupied
value the state still holds (in an ITE, or in an entry's `prev` or
`replaced`: the key's present version and superseded ones, as an earlier
operation may have seen them linked), and then, after any interleaving of
other clients, reads the hinted entry (a READ that no ITE read preceded in
this pass: a generation mismatch is a miss, not a torn pass) and the
candidates' ITEs, one step each, as in `rules.py`.  The auditor takes its
hint before it reuses every staged slot, so the audit's hints are as stale
as they can be.

Variants:
  hints        rules.py's `rs` with hinted GETs.
  hints-nocheck  mutant: the pre-read answers without an ITE of this pass
               holding the hint (must fail: a stale read).
  hints-anyst  mutant: the pre-read answers from an entry of the key that is
               not committed, and a write takes such an entry's read as the
               read of its candidate (must fail).
  hints-wnocheck  mutant: a write takes the hinted entry's read for the
               read of a candidate whose ITE holds another occupied value
               (must fail).

usage: python3 hints.py VARIANTS CONFIGS [max_states] [time_limit_s]
"""
import io
import sys

import rules
from rules import mc, rbroad


def choose(x, n):
    """A choice among n outcomes, each explored."""
    return x._real(('choose', n))


_perform = mc.Model.perform


def perform(self, w, c, act):
    if act[0] == 'choose':
        return [(i, w if i == 0 else w.clone()) for i in range(act[1])]
    return _perform(self, w, c, act)


mc.Model.perform = perform


def hinted(x):
    """The GET's hint: none, or any occupied value the state still holds
    (an ITE's, or an entry's `prev` or `replaced`), which covers every value
    an earlier operation of any client can have seen linked and whose entry
    is still readable: the key's present version and its superseded ones."""
    w = x.w

    def values():
        held = set(v for v in w.ites if mc.is_occ(v))
        for r in w.slots:
            if r[mc.U]:
                held.update(v for v in (r[mc.PREV], r[mc.REP]) if mc.is_occ(v))
        return tuple(sorted(held))
    seen = x._instant(values)
    pick = choose(x, len(seen) + 1)
    return None if pick == 0 else seen[pick - 1]


def op_get(x, k):
    m = x.m
    cands = m.keys[k]
    if not x.first:
        if x.past_deadline():
            raise mc.OpTimeout()
    hint = hinted(x) if x.first else None
    if m.is_auditor(x.c) and x.first and m.audit_first(x):
        x.force_reuse()
    pre = x.rd(hint, linked=False) if hint is not None else None
    ites = [x.ri(s) for s in cands]
    if pre is not None and pre.key == k:
        holds = hint in ites or m.hint_mutant == 'nocheck'
        committed = pre.st == mc.VAL or m.hint_mutant == 'anyst'
        if holds and committed:
            return mc.DONE(0 if pre.fl & mc.TOMB else pre.val)
    for i, s in enumerate(cands):
        v = ites[i]
        if mc.is_empty(v):
            continue
        view = x.rd(v)
        if view is None:
            return mc.RETRY
        if mc.is_moved(v):
            if view.st != mc.VAL and mc.help_marker(x, s, v, view) == mc.ACTED:
                return mc.RETRY
            continue
        if view.key != k:
            continue
        r = rules.get_decide(x, k, v, s, view)
        if r is rules.SKIP:
            continue
        return r
    rev = [x.ri(s) for s in cands]
    if rev == ites:
        return mc.DONE(0)
    return mc.RETRY


def op_write(x, kind, k, val):
    """write.rs `write_attempt` (rules.py's, stage_dup_at_clear on) with a
    hint on the first attempt: a committed entry of the key read through it
    stands for the read of that candidate's entry when an ITE of the pass
    holds the hint; anything else is read as without a hint."""
    m = x.m
    cands = m.keys[k]
    x.check_deadline()
    hint = hinted(x) if x.first else None
    if m.is_auditor(x.c) and m.audit_first(x):
        x.force_reuse()
    pre = x.rd(hint, linked=False) if hint is not None else None
    usable = pre is not None and pre.key == k and (pre.st == mc.VAL or m.hint_mutant == 'anyst')
    ites = [x.ri(s) for s in cands]
    holder = None
    htomb = 0
    hheader = None
    dups = []
    empty_i = next((i for i, v in enumerate(ites) if mc.is_empty(v)), None)
    for i, s in enumerate(cands):
        v = ites[i]
        if mc.is_empty(v):
            continue
        stale = m.hint_mutant == 'wnocheck' and mc.is_occ(v)
        view = pre if usable and (v == hint or stale) else x.rd(v)
        if view is None:
            return mc.RETRY
        if mc.is_moved(v):
            mc.help_marker(x, s, v, view)
            return mc.RETRY
        if mc.help_entry(x, s, v, view) == mc.ACTED:
            return mc.RETRY
        if view.key != k:
            continue
        if view.st != mc.VAL:
            return mc.RETRY
        if holder is None:
            holder = i
            htomb = view.fl & mc.TOMB
            hheader = view
        else:
            dups.append((i, view))
    existed = holder is not None and not htomb
    if kind == 'del' and not existed:
        rev = [x.ri(s) for s in cands]
        return mc.DONE(mc.R_FALSE) if rev == ites else mc.RETRY
    target = holder if holder is not None else empty_i
    if target is None:
        mc.make_room(x, cands, ites)
        return mc.RETRY
    replaced = ites[target]
    mine = x.alloc((k, val if kind == 'put' else 0, mc.TOMB if kind == 'del' else 0,
                    replaced, replaced, -1))
    if mine is None:
        return mc.DONE(mc.R_ERR)
    slot = cands[target]
    try:
        old = x.cas(slot, replaced, mine)
    except mc.OpTimeout:
        x.release(mine)
        raise
    if old != replaced:
        x.release(mine)
        return mc.RETRY
    expected = list(ites)
    expected[target] = mine
    for d, header in dups:
        expected[d] = mc.emptied(ites[d])
        if x.cas(cands[d], ites[d], mc.emptied(ites[d])) == ites[d]:
            mc.retire(x, ites[d], header)
    rev = [x.ri(s) for s in cands]
    if rev != expected:
        x.cst(mine, mc.ABT)
        if x.cas(slot, mine, replaced) == mine:
            x.stage(mine)
        return mc.RETRY
    found = x.cst(mine, mc.VAL)
    if found == mc.ABT:
        return mc.RETRY
    if mc.is_occ(replaced) and hheader is not None:
        mc.retire(x, replaced, hheader)
    if kind == 'del' and not x.past_deadline():
        if x.cas(slot, mine, mc.emptied(mine)) == mine:
            x.stage(mine)
    if kind == 'del':
        return mc.DONE(mc.R_TRUE if existed else mc.R_FALSE)
    return mc.DONE(mc.R_OK)


mc.op_get = op_get
mc.op_write = op_write

FLAGS = {'absent_first_insert': True, 'stage_dup_at_clear': True}
VARIANTS = {
    'hints': (rules.RS, dict(FLAGS, hint_mutant=None)),
    'hints-nocheck': (rules.RS, dict(FLAGS, hint_mutant='nocheck')),
    'hints-anyst': (rules.RS, dict(FLAGS, hint_mutant='anyst')),
    'hints-wnocheck': (rules.RS, dict(FLAGS, hint_mutant='wnocheck')),
}


def run(cname, vname, max_states, time_limit):
    ns, keys, init, scripts, opts = rbroad.CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = VARIANTS[vname]
    kw.update(model_kw)
    m = mc.Model(ns, keys, scripts, init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    r = mc.explore(m, name='%s [%s]' % (cname, vname), max_states=max_states,
                   time_limit=time_limit, liveness=True)
    buf = io.StringIO()
    mc.report(m, r, out=buf)
    return buf.getvalue()


if __name__ == '__main__':
    vs = sys.argv[1].split(',')
    cs = list(rbroad.CONFIGS) if sys.argv[2] == 'all' else sys.argv[2].split(',')
    max_states = int(sys.argv[3]) if len(sys.argv) > 3 else 3_000_000
    time_limit = float(sys.argv[4]) if len(sys.argv) > 4 else 1200
    for c in cs:
        for v in vs:
            print(run(c, v, max_states, time_limit), flush=True)
