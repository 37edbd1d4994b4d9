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
import sys

import rules
from rules import mc


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


class Hinted:
    """The context `x` of a pass that began with a hinted read: its ITE
    reads return `ites` first (those of the batch), a read of an entry for
    which `swap` holds returns `pre` (the hinted read standing for it), and
    the deadline check and the audit's reuse, done before the batch, are
    not done again."""

    def __init__(self, x, ites=(), pre=None, swap=lambda v: False):
        self._x = x
        self._ites = list(ites)
        self._pre = pre
        self._swap = swap

    def __getattr__(self, name):
        return getattr(self._x, name)

    def check_deadline(self):
        pass

    def force_reuse(self):
        return 0

    def ri(self, s):
        return self._ites.pop(0) if self._ites else self._x.ri(s)

    def rd(self, v, linked=True):
        return self._pre if self._swap(v) else self._x.rd(v, linked)


def hinted_batch(x, cands):
    """The first pass's batch: the hint (chosen before the audit's reuse,
    so that the audit's hints are as stale as they can be), the hinted
    entry's read, then the ITEs; (hint, pre, ites), or None without a
    hint."""
    m = x.m
    hint = hinted(x)
    if m.is_auditor(x.c) and m.audit_first(x):
        x.force_reuse()
    if hint is None:
        return None
    pre = x.rd(hint, linked=False)
    return hint, pre, [x.ri(s) for s in cands]


def op_get(x, k):
    """get.rs `get` with a hint on the first pass: the answer from the
    hinted entry, or the pass without a hint on the ITEs of the batch."""
    m = x.m
    if not x.first:
        return rules.op_get(x, k)
    batch = hinted_batch(x, m.keys[k])
    if batch is None:
        return rules.op_get(Hinted(x), k)
    hint, pre, ites = batch
    if pre is not None and pre.key == k:
        holds = hint in ites or m.hint_mutant == 'nocheck'
        committed = pre.st == mc.VAL or m.hint_mutant == 'anyst'
        if holds and committed:
            return mc.DONE(0 if pre.fl & mc.TOMB else pre.val)
    return rules.op_get(Hinted(x, ites), k)


def op_write(x, kind, k, val):
    """write.rs `write_attempt` (rules.py's) with a hint on the first
    attempt: a committed entry of the key read through it stands for the
    read of the candidate whose ITE holds the hint; anything else is read
    as without a hint."""
    m = x.m
    if not x.first:
        return rules.op_write(x, kind, k, val)
    x.check_deadline()
    batch = hinted_batch(x, m.keys[k])
    if batch is None:
        return rules.op_write(Hinted(x), kind, k, val)
    hint, pre, ites = batch
    usable = pre is not None and pre.key == k and (
        pre.st == mc.VAL or m.hint_mutant == 'anyst')

    def swap(v):
        stale = m.hint_mutant == 'wnocheck' and mc.is_occ(v)
        return usable and (v == hint or stale)
    return rules.op_write(Hinted(x, ites, pre, swap), kind, k, val)


mc.op_get = op_get
mc.op_write = op_write

FLAGS = {'absent_first_insert': True, 'stage_dup_at_clear': True}
VARIANTS = {
    'hints': (rules.RS, dict(FLAGS, hint_mutant=None)),
    'hints-nocheck': (rules.RS, dict(FLAGS, hint_mutant='nocheck')),
    'hints-anyst': (rules.RS, dict(FLAGS, hint_mutant='anyst')),
    'hints-wnocheck': (rules.RS, dict(FLAGS, hint_mutant='wnocheck')),
}


if __name__ == '__main__':
    rules.main(sys.argv, VARIANTS)
