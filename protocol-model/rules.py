#!/usr/bin/env python3
"""Nessie-rs's own rule changes, checked with the shared recycling model.

The bounded model checker lives in ../../shared/reference/protocol-model
(mc_recycle.py, driven by rbroad.py).  This file does not copy it: it imports
it and replaces the few client functions whose rules the implementation
refines, each behind a flag, so that every refinement is checked under the
fixed rules (i)-(v) on the model's configurations.

Refinements (flags on the Model object):

  absent_first_insert  GET meets a live INVALID PUT/DELETE entry of its key
                       whose `prev` is empty (the key's first insert into
                       that slot): the slot holds no committed version of the
                       key, so the GET goes on with the next candidate instead
                       of backing off until the owner commits or is declared
                       dead.  The reverse pass still guards the "not found".
  stage_dup_at_clear   A PUT/DELETE that clears a duplicate committed entry of
                       its key stages it as soon as its clear CAS wins (the
                       single-stager rule (i)), not after its own commit, so a
                       later abort or timeout cannot leak it.

The reverse pass may ride in the link's batch only behind the CAS, on the
CAS's node (docs/design.md#put, step 7): its READs still follow the link,
as in the model.  The mutant flag below lets the READs of the other
candidates (on other nodes, whose order no fabric keeps) run ahead of it:

  rev_ahead_of_link    (mutant R1) a write without duplicates reads every
                       candidate but its target right before its link CAS
                       and uses those reads in its reverse pass.

usage: python3 rules.py VARIANTS CONFIGS [max_states] [time_limit_s]
  VARIANTS: comma-separated names of VARIANTS below; CONFIGS: names of
  rbroad.CONFIGS, or 'all'.
"""
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get(
    'NESSIE_PROTOCOL_MODEL',
    os.path.join(HERE, '..', '..', 'shared', 'reference', 'protocol-model'))
sys.path.insert(0, SHARED)

import mc_recycle as mc  # noqa: E402
import rbroad  # noqa: E402

SKIP = ('SKIP',)


def get_decide(x, k, v, s, view):
    """get.rs `decide`: one entry holding the key decides, or is skipped."""
    if view.st == mc.VAL:
        return mc.DONE(0 if view.fl & mc.TOMB else view.val)
    if view.st == mc.ABT:
        mc.help_entry(x, s, v, view)
        return mc.RETRY
    if mc.help_entry(x, s, v, view) == mc.ACTED:
        return mc.RETRY
    if view.fl & mc.MIG:
        return mc.RETRY                           # V1
    prev = view.prev
    if getattr(x.m, 'absent_first_insert', False) and mc.is_empty(prev):
        return SKIP                               # no committed version here
    if not mc.is_occ(prev):
        return mc.RETRY
    pv = x.rd(prev, linked=False)
    if pv is None or pv.key != k or pv.st != mc.VAL:
        return mc.RETRY
    return mc.DONE(0 if pv.fl & mc.TOMB else pv.val)


def op_get(x, k):
    """get.rs `get`: forward pass, decide on the first holder (or skip it),
    reverse pass before answering "not found"."""
    m = x.m
    cands = m.keys[k]
    if not x.first:
        if x.past_deadline():
            raise mc.OpTimeout()
    if m.is_auditor(x.c) and x.first and m.audit_first(x):
        x.force_reuse()
    ites = [x.ri(s) for s in cands]
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
        r = get_decide(x, k, v, s, view)
        if r is SKIP:
            continue
        return r
    rev = [x.ri(s) for s in cands]
    if rev == ites:
        return mc.DONE(0)
    return mc.RETRY


def op_write(x, kind, k, val):
    """write.rs `write_attempt`, with cleared duplicates staged at the clear
    (flag stage_dup_at_clear) or after the commit (the shared model)."""
    m = x.m
    early = getattr(m, 'stage_dup_at_clear', False)
    cands = m.keys[k]
    x.check_deadline()
    if m.is_auditor(x.c) and m.audit_first(x):
        x.force_reuse()
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
        view = x.rd(v)
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
    ahead = {}
    if getattr(m, 'rev_ahead_of_link', False) and not dups:
        ahead = {i: x.ri(s) for i, s in enumerate(cands) if i != target}
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
    cleared = []
    for d, header in dups:
        expected[d] = mc.emptied(ites[d])
        if x.cas(cands[d], ites[d], mc.emptied(ites[d])) == ites[d]:
            if early:
                mc.retire(x, ites[d], header)
            else:
                cleared.append((d, header))
    rev = [ahead[i] if i in ahead else x.ri(s) for i, s in enumerate(cands)]
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
    for d, header in cleared:
        mc.retire(x, ites[d], header)
    if kind == 'del' and not x.past_deadline():
        if x.cas(slot, mine, mc.emptied(mine)) == mine:
            x.stage(mine)
    if kind == 'del':
        return mc.DONE(mc.R_TRUE if existed else mc.R_FALSE)
    return mc.DONE(mc.R_OK)


mc.op_get = op_get
mc.op_write = op_write

# The implementation's rules: the fixed rules (i)-(v) of REPORT-recycling.md
# without retire()'s own marker check (the recycler resolves markers), plus
# the refinements above.
RS = dict(rbroad.FIXED, retire_check=False)
VARIANTS = {
    'fixed': (dict(rbroad.FIXED), {}),
    'rs': (RS, {'absent_first_insert': True, 'stage_dup_at_clear': True}),
    'rs-absent': (dict(rbroad.FIXED), {'absent_first_insert': True}),
    'rs-dup': (dict(rbroad.FIXED), {'stage_dup_at_clear': True}),
    'rs-put': (dict(RS, audit_put=True), {'absent_first_insert': True, 'stage_dup_at_clear': True}),
    'rs-any': (dict(RS, reuse_any=True), {'absent_first_insert': True, 'stage_dup_at_clear': True}),
    'rs-r1': (RS, {'absent_first_insert': True, 'stage_dup_at_clear': True,
                   'rev_ahead_of_link': True}),
}


def run(cname, vname, max_states, time_limit, variants=None):
    """Explores configuration `cname` under variant `vname` (of `variants`,
    by default this file's); returns the report."""
    ns, keys, init, scripts, opts = rbroad.CONFIGS[cname]
    kw = dict(opts)
    model_kw, flags = (variants or VARIANTS)[vname]
    kw.update(model_kw)
    m = mc.Model(ns, keys, scripts, init=init, **kw)
    for name, value in flags.items():
        setattr(m, name, value)
    r = mc.explore(m, name='%s [%s]' % (cname, vname), max_states=max_states,
                   time_limit=time_limit, liveness=True)
    buf = io.StringIO()
    mc.report(m, r, out=buf)
    return buf.getvalue()


def main(argv, variants=None):
    """The command line: VARIANTS CONFIGS [max_states] [time_limit_s]."""
    vs = argv[1].split(',')
    cs = list(rbroad.CONFIGS) if argv[2] == 'all' else argv[2].split(',')
    max_states = int(argv[3]) if len(argv) > 3 else 3_000_000
    time_limit = float(argv[4]) if len(argv) > 4 else 1200
    for c in cs:
        for v in vs:
            print(run(c, v, max_states, time_limit, variants), flush=True)


if __name__ == '__main__':
    main(sys.argv)
