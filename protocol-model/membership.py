#!/usr/bin/env python3
"""Bounded model checker of the membership agreement (docs/replication.md).

One instance of Disk Paxos decides view 1 from view 0.  The disks are the
META pages of view 0's members; every proposer owns one block (mbal, bal,
inp) on every disk and is the only writer of it.  Around the agreement sit
the leases of view 0, the decision's activation delay and the faults.

Atomic steps (each is one verb, or one local event):
  * a proposer's WRITE of its block to one disk, or its READ of another
    proposer's block on one disk (a failed verb when the disk is lost or the
    partition lies between them; a failed verb disqualifies that disk for
    the phase and the rest of its verbs are skipped);
  * a node's lease-renewal READ of one disk (all blocks of the META page in
    one READ; each block is checksummed, so a torn block is reread and a
    block is seen whole);
  * the completion of a renewal (its replies may arrive after ticks);
  * the loss of a node's memory (its blocks are gone, its proposer stops);
  * the crash of a proposer (its memory survives; it stops for good, which
    also covers a stall that never ends; a stall that does end is simply a
    proposer not scheduled for a while);
  * the cut of one node from all the others (both directions, for good);
  * a tick of the global clock; the activation of the decided view.

Time.  Counters are kept relative so the state space stays finite: a lease's
remaining ticks, the remaining ticks an operation of view 0 may still be in
progress on the node (lease + D, worst case: an operation checked its gate
just before expiry and its CAS lands D later), a renewal's age, the age of
the decision and of the cut.  A lease granted by a renewal is L minus the
renewal's age at completion (L from the moment its reads began).  The
decided view may be activated once the decision is L + D old; the model has
one clock, so the skew margin of the design is 0.

Every reachable state is checked for
  AGREEMENT   two proposers decide different views;
  VALIDITY    a decided view was some proposer's own proposal;
  MINORITY    a proposer cut off before its phase 2 began decides, or a cut
              node still holds a lease L ticks after the cut;
  FENCE       the new view is active while a node may still have an
              operation of view 0 in progress.
Bounded liveness is reported, not failed: states from which no decision can
be reached, by cause.

Mutants (flags on a configuration; each must give a counterexample):
  no-reread   phase 2 decides once its WRITEs landed, without reading again
  own-value   phase 1 keeps the proposer's own view, not the highest-bal inp
  quorum1     any single disk is a quorum (proposers and renewals)
  drain-L     activation L after the decision instead of L + D
  no-drain    activation at the decision
  lease-end   a lease of L counted from the renewal's completion
  amnesia     a lost memory may come back empty and be read as the same disk

usage: python3 membership.py [all | mutants | NAME[,NAME..]] [time_limit_s]
  all      every clean configuration (exit 1 if any violates a property)
  mutants  every mutant on its configuration (exit 1 if one is not caught)
  NAME     a configuration of CONFIGS or a mutant of MUTANTS
"""
import itertools
import sys
import time
from collections import deque

IDLE, P1, P2, DONE, GAVEUP, DEAD, CRASHED = range(7)
PSN = ('idle', 'phase1', 'phase2', 'done', 'gave-up', 'dead', 'crashed')

# proposer tuple fields
ST, RND, BAL, VAL, POS, OK, CUR, BB, BI, SEEN, MYBAL, MYINP, CUTF = range(13)
# global tuple fields
LOST, CUT, CUTAGE, DEC, DECAGE, ACT, PROPOSED, NCRASH, NLOST, SAW = range(10)


class Config:
    """One configuration: nodes, proposers, the proposals each may make,
    bounds, faults allowed, the nodes that hold leases, and mutant flags.

    early: when a quorum of disks is complete before the last disk, the
    proposer 'may' go on (both branches explored), 'must' go on (the
    remaining verbs are dropped), or goes on 'never' (visits every disk)."""

    def __init__(self, name, n, proposers, rounds, losses=0, lossable=None,
                 crashes=0, cut=None, renewers=(), L=2, D=1, view0=None,
                 joins=(), takeover=(), max_suspects=1, max_choices=None, mutants=(),
                 early='may', note=''):
        self.name, self.n, self.rounds = name, n, rounds
        self.props = tuple(proposers)            # proposer index -> node id
        self.P = len(self.props)
        self.view0 = tuple(view0 or 'A' * n)
        self.members = tuple(i for i in range(n) if self.view0[i] == 'A')
        self.maj = len(self.members) // 2 + 1
        self.losses, self.crashes, self.cut = losses, crashes, cut
        self.lossable = tuple(self.members if lossable is None else lossable)
        self.renewers = tuple(renewers)
        self.L, self.D = L, D
        self.mut = set(mutants)
        self.note = note
        self.takeover = tuple(takeover)
        self.early = early
        if 'quorum1' in self.mut:
            self.maj = 1
        self.wait = L + D
        if 'drain-L' in self.mut:
            self.wait = L
        if 'no-drain' in self.mut:
            self.wait = 0
        # proposals: views as strings of per-node states; index 0 = none
        self.values = [None]
        self.choices = []
        for p, node in enumerate(self.props):
            ch = []
            others = [m for m in self.members if m != node]
            for k in range(1, max_suspects + 1):
                for sus in itertools.combinations(others, k):
                    ch.append(self._value(''.join(
                        'L' if i in sus else self.view0[i] for i in range(n))))
            for (jp, jn) in joins:
                if jp == p:
                    ch = [self._value(''.join(
                        'R' if i == jn else self.view0[i] for i in range(n)))]
            if p in self.takeover:                # the same members, next epoch
                ch = [self._value(''.join(self.view0))]
            ch = ch[p % len(ch):] + ch[:p % len(ch)]
            if max_choices:
                ch = ch[:max_choices]
            self.choices.append(tuple(ch))
        self.verbs = [self._verbs(p, 1) for p in range(self.P)]
        self.verbs2 = [self._verbs(p, 2) for p in range(self.P)]

    def _value(self, view):
        if view not in self.values:
            self.values.append(view)
        return self.values.index(view)

    def order(self, node):
        """Disks in the order a node visits them: its own first."""
        ms = self.members
        i = ms.index(node) if node in ms else 0
        return ms[i:] + ms[:i]

    def _verbs(self, p, phase):
        """One phase's verbs: per disk, the WRITE of p's block, then READs of
        every other proposer's block.  Entries: (disk, q or None, last of its
        disk, index of the next disk's first verb)."""
        out = []
        for d in self.order(self.props[p]):
            seq = [(d, None)]
            if not (phase == 2 and 'no-reread' in self.mut):
                seq += [(d, q) for q in range(self.P) if q != p]
            start = len(out)
            for i, (dd, q) in enumerate(seq):
                out.append([dd, q, i == len(seq) - 1, start + len(seq)])
        return tuple(tuple(v) for v in out)

    def vname(self, v):
        if not v:
            return '-'
        s = self.values[v]
        return '{' + ','.join(
            str(i) + ('' if c == 'A' else '(restoring)')
            for i, c in enumerate(s) if c in 'AR') + '}'


class Model:
    def __init__(self, cfg):
        self.c = cfg

    def initial(self):
        c = self.c
        disks = tuple(((0, 0, 0),) * c.P if d in c.members else None
                      for d in range(c.n))
        props = tuple((IDLE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
                      for _ in range(c.P))
        nodes = tuple((c.L, c.L + c.D, None) if i in c.renewers else (0, 0, None)
                      for i in range(c.n))
        g = (0,) * 10
        return (disks, props, nodes, g)

    # ------------------------------------------------------------ helpers
    def reach(self, g, a, b):
        """Can node a's verb reach node b's memory?"""
        c = self.c
        if (g[LOST] >> b) & 1:
            return False
        if g[CUT] and a != b and c.cut in (a, b):
            return False
        return True

    def next_ballot(self, p, rnd, seen):
        c = self.c
        r = rnd + 1
        while r * c.n + c.props[p] <= seen:
            r += 1
        return r

    def start_round(self, pr, p, rnd, seen):
        """Phase 1 of round rnd, or give up when the rounds are spent."""
        c = self.c
        if rnd > c.rounds:
            return (GAVEUP,) + pr[1:]
        b = rnd * c.n + c.props[p]
        return (P1, rnd, b, pr[VAL], 0, 0, 1, pr[MYBAL], pr[MYINP], max(seen, b),
                pr[MYBAL], pr[MYINP], 0)

    # ------------------------------------------------------------ steps
    def successors(self, s):
        """Yield (label, new state, violation or None)."""
        c = self.c
        disks, props, nodes, g = s
        for p in range(c.P):
            yield from self.prop_steps(s, p)
        if not g[ACT]:
            for n in c.renewers:
                yield from self.renew_steps(s, n)
        # faults
        if g[NLOST] < c.losses:
            for d in c.lossable:
                if not (g[LOST] >> d) & 1:
                    yield ('lose', d), self.lose(s, d), None
        if 'amnesia' in c.mut:
            for d in c.lossable:
                if (g[LOST] >> d) & 1 and disks[d] is None:
                    ds = list(disks)
                    ds[d] = ((0, 0, 0),) * c.P
                    g2 = list(g)
                    g2[LOST] &= ~(1 << d)
                    yield ('reborn', d), (tuple(ds), props, nodes, tuple(g2)), None
        if c.cut is not None and not g[CUT]:
            g2 = list(g)
            g2[CUT], g2[CUTAGE] = 1, 0
            yield ('cut', c.cut), (disks, props, nodes, tuple(g2)), None
        if g[NCRASH] < c.crashes:
            for p in range(c.P):
                if props[p][ST] in (P1, P2):
                    ps = list(props)
                    ps[p] = (CRASHED,) + props[p][1:]
                    g2 = list(g)
                    g2[NCRASH] += 1
                    yield ('crash', p), (disks, tuple(ps), nodes, tuple(g2)), None
        if g[DEC] and not g[ACT] and g[DECAGE] >= c.wait:
            g2 = list(g)
            g2[ACT] = 1
            s2 = (disks, props, nodes, tuple(g2))
            yield ('activate', g[DEC]), s2, self.check(s2)
        if not g[ACT]:
            yield ('tick',), self.tick(s), None

    def lose(self, s, d):
        c = self.c
        disks, props, nodes, g = s
        ds = list(disks)
        ds[d] = None
        ps = tuple((DEAD,) + pr[1:] if c.props[p] == d and pr[ST] != DONE else pr
                   for p, pr in enumerate(props))
        ns = list(nodes)
        ns[d] = (nodes[d][0], nodes[d][1], None)   # its renewals stop
        g2 = list(g)
        g2[LOST] |= 1 << d
        g2[NLOST] += 1
        return (tuple(ds), ps, tuple(ns), tuple(g2))

    def tick(self, s):
        c = self.c
        disks, props, nodes, g = s
        ns = []
        for lease, busy, ren in nodes:
            if ren is not None:
                ren = None if ren[0] + 1 >= c.L else (ren[0] + 1,) + ren[1:]
            ns.append((max(lease - 1, 0), max(busy - 1, 0), ren))
        g2 = list(g)
        if g[DEC]:
            g2[DECAGE] = min(g[DECAGE] + 1, c.wait)
        if g[CUT]:
            g2[CUTAGE] = min(g[CUTAGE] + 1, c.L)
        return (disks, props, tuple(ns), tuple(g2))

    def prop_steps(self, s, p):
        c = self.c
        disks, props, nodes, g = s
        pr = props[p]
        st = pr[ST]
        node = c.props[p]
        if st == IDLE:
            if p in c.takeover and not (g[SAW] >> node) & 1:
                return
            for v in c.choices[p]:
                pr2 = (IDLE, 0, 0, v) + pr[4:]
                pr2 = self.start_round(pr2, p, 1, 0)
                ps = list(props)
                ps[p] = pr2
                g2 = list(g)
                g2[PROPOSED] |= 1 << v
                yield ('propose', p, v), (disks, tuple(ps), nodes, tuple(g2)), None
            return
        if st not in (P1, P2):
            return
        verbs = c.verbs[p] if st == P1 else c.verbs2[p]
        d, q, last, nxt = verbs[pr[POS]]
        pr = list(pr)
        ds = disks
        abort = False
        if not self.reach(g, node, d):
            res = 'fails'
            pr[CUR] = 0
            last = True
        elif q is None:
            res = 'ok'
            blk = (pr[BAL], pr[MYBAL], pr[MYINP]) if st == P1 else (pr[BAL], pr[BAL], pr[BI])
            dl = list(disks[d])
            dl[p] = blk
            ds = list(disks)
            ds[d] = tuple(dl)
            ds = tuple(ds)
        else:
            mbal, bal, inp = disks[d][q]
            res = (mbal, bal, inp)
            pr[SEEN] = max(pr[SEEN], mbal)
            if mbal > pr[BAL]:
                abort = True
            elif st == P1 and bal > pr[BB]:
                pr[BB], pr[BI] = bal, inp
        label = ('verb', p, d, q, res)
        ps = list(props)
        if abort:
            rnd = self.next_ballot(p, pr[RND], pr[SEEN])
            ps[p] = self.start_round(tuple(pr), p, rnd, pr[SEEN])
            yield label + ('abort',), (ds, tuple(ps), nodes, g), None
            return
        if last:
            pr[OK] += pr[CUR]
            pr[CUR] = 1
            pr[POS] = nxt
        else:
            pr[POS] += 1
        if pr[POS] >= len(verbs):
            pr, g2, label, viol = self.end_phase(pr, p, st, g, label)
            ps[p] = tuple(pr)
            s2 = (ds, tuple(ps), nodes, g2)
            yield label, s2, viol or self.check(s2)
            return
        if not (last and pr[OK] >= c.maj and c.early == 'must'):
            ps[p] = tuple(pr)
            s2 = (ds, tuple(ps), nodes, g)
            yield label, s2, self.check(s2)
        if last and pr[OK] >= c.maj and c.early != 'never':
            # a quorum of disks has answered: go on without waiting for the
            # rest (their verbs are dropped: they never land)
            pr, g2, label, viol = self.end_phase(list(pr), p, st, g, label + ('quorum: go on',))
            ps[p] = tuple(pr)
            s2 = (ds, tuple(ps), nodes, g2)
            yield label, s2, viol or self.check(s2)

    def end_phase(self, pr, p, st, g, label):
        """The phase's verbs are done: next round, phase 2, or decide."""
        c = self.c
        node = c.props[p]
        viol = None
        g2 = g
        if pr[OK] < c.maj:                   # no majority: next round
            rnd = self.next_ballot(p, pr[RND], pr[SEEN])
            pr = list(self.start_round(tuple(pr), p, rnd, pr[SEEN]))
            label += ('no majority',)
        elif st == P1:
            v = pr[BI] if pr[BB] > 0 and 'own-value' not in c.mut else pr[VAL]
            pr[ST], pr[POS], pr[OK], pr[CUR] = P2, 0, 0, 1
            pr[BI], pr[MYBAL], pr[MYINP] = v, pr[BAL], v
            pr[CUTF] = 1 if g[CUT] and c.cut == node else 0
            label += ('phase 2 with ' + c.vname(v),)
        else:
            pr[ST] = DONE
            v = pr[BI]
            g2 = list(g)
            label += ('DECIDES ' + c.vname(v),)
            if not g[DEC]:
                g2[DEC], g2[DECAGE] = v, 0
            elif g[DEC] != v:
                viol = 'AGREEMENT: %s decided, and now %s' % (c.vname(g[DEC]), c.vname(v))
            if not (g[PROPOSED] >> v) & 1:
                viol = 'VALIDITY: %s was never proposed' % c.vname(v)
            if pr[CUTF]:
                viol = 'MINORITY: proposer %d on the cut-off node %d decides' % (p, node)
            g2 = tuple(g2)
        return pr, g2, label, viol

    def renew_steps(self, s, n):
        """A node's lease renewal: begin, READ disks in its order until a
        majority showed no ballot of the next instance, complete."""
        c = self.c
        disks, props, nodes, g = s
        if (g[LOST] >> n) & 1:
            return
        lease, busy, ren = nodes[n]
        ns = list(nodes)
        if ren is None:
            if lease < c.L:
                ns[n] = (lease, busy, (0, 0, 0))
                yield ('renew-begin', n), (disks, props, tuple(ns), g), None
            return
        age, idx, ok = ren
        if ok >= c.maj:                           # reads done: the replies are in
            grant = c.L if 'lease-end' in c.mut else c.L - age
            lease2 = max(lease, grant)
            busy2 = max(busy, lease2 + c.D) if grant > 0 else busy
            ns[n] = (lease2, busy2, None)
            s2 = (disks, props, tuple(ns), g)
            yield ('renew-done', n, lease2), s2, self.check(s2)
            return
        order = c.order(n)
        d = order[idx]
        if not self.reach(g, n, d):
            res = 'fails'
            ok2 = ok
        elif any(blk[0] > 0 for blk in disks[d]):
            res = 'ballot seen'
            ok2 = -1
            if any(c.props[p] == n for p in c.takeover) and not (g[SAW] >> n) & 1:
                g = g[:SAW] + (g[SAW] | 1 << n,)
        else:
            res = 'no ballot'
            ok2 = ok + 1
        if ok2 < 0 or (ok2 < c.maj and idx + 1 >= len(order)):
            ns[n] = (lease, busy, None)
            yield ('renew-read', n, d, res, 'renewal fails'), (disks, props, tuple(ns), g), None
        else:
            ns[n] = (lease, busy, (age, idx + 1, ok2))
            yield ('renew-read', n, d, res), (disks, props, tuple(ns), g), None

    def check(self, s):
        """State invariants: FENCE and the minority's lease."""
        c = self.c
        disks, props, nodes, g = s
        if g[ACT]:
            for i, (lease, busy, _) in enumerate(nodes):
                if busy > 0:
                    kind = 'MINORITY' if g[CUT] and c.cut == i else 'FENCE'
                    return '%s: view %s active while node %d may run an operation of view 0 ' \
                           'for %d more tick(s)' % (kind, c.vname(g[DEC]), i, busy)
        if g[CUT] and g[CUTAGE] >= c.L and nodes[c.cut][0] > 0:
            return 'MINORITY: cut-off node %d holds a lease %d ticks after the cut' % (c.cut, g[CUTAGE])
        return None

    # ------------------------------------------------------------ display
    def show(self, s):
        c = self.c
        disks, props, nodes, g = s
        out = []
        for d in range(c.n):
            if disks[d] is not None:
                out.append('disk%d[%s]' % (d, ' '.join(
                    '%d:%s' % (mb, c.vname(v) if b else '.') if mb else '.'
                    for mb, b, v in disks[d])))
        for p, pr in enumerate(props):
            if pr[ST] in (P1, P2):
                out.append('p%d(n%d) %s b=%d pos=%d ok=%d' % (
                    p, c.props[p], PSN[pr[ST]], pr[BAL], pr[POS], pr[OK]))
            else:
                out.append('p%d(n%d) %s' % (p, c.props[p], PSN[pr[ST]]))
        for n in c.renewers:
            lease, busy, ren = nodes[n]
            out.append('n%d lease=%d ops<=%d%s' % (
                n, lease, busy, '' if ren is None else ' renewing(age %d)' % ren[0]))
        if g[DEC]:
            out.append('decided %s age %d%s' % (c.vname(g[DEC]), g[DECAGE],
                                                ' ACTIVE' if g[ACT] else ''))
        return ' | '.join(out)

    def describe(self, label):
        c = self.c
        k = label[0]
        if k == 'propose':
            return 'p%d (node %d) proposes %s' % (label[1], c.props[label[1]], c.vname(label[2]))
        if k == 'verb':
            _, p, d, q, res = label[:5]
            extra = ' -- ' + ', '.join(label[5:]) if len(label) > 5 else ''
            if q is None:
                return 'p%d WRITE its block to disk %d: %s%s' % (p, d, res, extra)
            if res != 'fails':
                res = '(mbal %d, bal %d, inp %s)' % (res[0], res[1], c.vname(res[2]))
            return 'p%d READ p%d\'s block on disk %d: %s%s' % (p, q, d, res, extra)
        if k == 'renew-begin':
            return 'node %d begins a lease renewal' % label[1]
        if k == 'renew-read':
            return 'node %d renewal READ of disk %d: %s' % (label[1], label[2], ', '.join(label[3:]))
        if k == 'renew-done':
            return 'node %d renewal completes: lease %d tick(s)' % (label[1], label[2])
        if k == 'lose':
            return 'node %d is LOST (memory and processes)' % label[1]
        if k == 'reborn':
            return 'node %d comes back with EMPTY memory and is read as a disk' % label[1]
        if k == 'cut':
            return 'node %d is CUT OFF from the others' % label[1]
        if k == 'crash':
            return 'p%d CRASHES' % label[1]
        if k == 'activate':
            return 'view %s is ACTIVATED' % c.vname(label[1])
        if k == 'tick':
            return '-- tick --'
        return str(label)


# ---------------------------------------------------------------- search
def explore(cfg, time_limit=900, liveness=True):
    """BFS over every interleaving.  Stops at the first violation (the
    shortest counterexample, since BFS) or when the space is exhausted."""
    m = Model(cfg)
    t0 = time.time()
    init = m.initial()
    ids = {init: 0}
    states = [init]
    parent = [None]
    depth = [0]
    succ = [] if liveness else None
    q = deque([0])
    res = dict(name=cfg.name, violation=None, limit=False)
    while q:
        sid = q.popleft()
        s = states[sid]
        out = []
        for label, s2, viol in m.successors(s):
            viol = viol or m.check(s2)
            nid = ids.get(s2)
            if nid is None:
                nid = len(states)
                ids[s2] = nid
                states.append(s2)
                parent.append((sid, label))
                depth.append(depth[sid] + 1)
                q.append(nid)
            if viol:
                res['violation'] = (nid, viol)
                break
            out.append(nid)
        if res['violation']:
            break
        if liveness:
            succ.append(out)
        if time.time() - t0 > time_limit:
            res['limit'] = True
            break
    res['states'] = len(states)
    res['depth'] = max(depth)
    res['exhaustive'] = not res['violation'] and not res['limit']
    if liveness and res['exhaustive']:
        res['stuck'] = stuck_states(cfg, states, succ)
    res['time'] = time.time() - t0
    res['_m'], res['_states'], res['_parent'] = m, states, parent
    return res


def stuck_states(cfg, states, succ):
    """States from which no run decides, sorted by cause."""
    n = len(states)
    pred = [[] for _ in range(n)]
    for a, outs in enumerate(succ):
        for b in outs:
            pred[b].append(a)
    good = bytearray(n)
    dq = deque(i for i in range(n) if states[i][3][DEC])
    for i in dq:
        good[i] = 1
    while dq:
        b = dq.popleft()
        for a in pred[b]:
            if not good[a]:
                good[a] = 1
                dq.append(a)
    causes = {}
    example = {}
    m = Model(cfg)
    for i in range(n):
        if good[i]:
            continue
        disks, props, nodes, g = states[i]
        top = max([b[0] for dk in disks if dk is not None for b in dk] + [0])
        live = [p for p in range(cfg.P) if props[p][ST] not in (DEAD, CRASHED)
                and not (g[CUT] and cfg.props[p] == cfg.cut)]

        def room(p):
            pr = props[p]
            if pr[ST] == IDLE:
                if p in cfg.takeover and not (g[SAW] >> cfg.props[p]) & 1:
                    return False
                return m.next_ballot(p, 0, top) <= cfg.rounds
            if pr[ST] in (P1, P2):
                return pr[BAL] >= top or m.next_ballot(p, pr[RND], top) <= cfg.rounds
            return False
        waiting = [p for p in live if props[p][ST] == IDLE and p in cfg.takeover
                   and not (g[SAW] >> cfg.props[p]) & 1]
        if not live:
            why = 'no live proposer on the majority side'
        elif waiting and not any(room(p) for p in live):
            why = 'the live takeover proposer is never triggered'
        elif not any(room(p) for p in live):
            why = 'no live proposer has a ballot above the highest mbal left in its rounds'
        else:
            why = 'OTHER'
        if any(pr[ST] == CRASHED for pr in props):
            why += '; a proposer crashed'
        if top:
            why += '; a ballot on a disk fails every lease renewal'
        causes[why] = causes.get(why, 0) + 1
        example.setdefault(why, i)
    return causes, example


def trace(res, sid):
    m, states, parent = res['_m'], res['_states'], res['_parent']
    path = []
    while parent[sid] is not None:
        p, label = parent[sid]
        path.append((label, states[sid]))
        sid = p
    path.reverse()
    lines = ['initial: ' + m.show(states[0])]
    for i, (label, s) in enumerate(path, 1):
        lines.append('%3d. %s' % (i, m.describe(label)))
    lines.append('final: ' + m.show(path[-1][1] if path else states[0]))
    return lines, len(path)


def report(res, out=print, show_trace=True):
    kind = 'EXHAUSTIVE, clean' if res['exhaustive'] else (
        'time limit hit' if res['limit'] else 'VIOLATION')
    out('== %s: %d states, max depth %d, %.1fs, %s' % (
        res['name'], res['states'], res['depth'], res['time'], kind))
    if res.get('stuck') and res['stuck'][0]:
        causes, example = res['stuck']
        for why, cnt in sorted(causes.items()):
            out('   no decision reachable from %d state(s): %s' % (cnt, why))
        if 'OTHER' in ''.join(causes) and show_trace:
            for why, sid in example.items():
                if why.startswith('OTHER'):
                    for line in trace(res, sid)[0]:
                        out('     ' + line)
    elif res['exhaustive']:
        out('   a decision is reachable from every state')
    if res['violation']:
        sid, msg = res['violation']
        lines, n = trace(res, sid)
        out('   %s' % msg)
        out('   counterexample: %d steps' % n)
        if show_trace:
            for line in lines:
                out('     ' + line)
    return res


# ---------------------------------------------------------------- configurations
CONFIGS = {
    'C1': dict(n=3, proposers=(0, 1), rounds=2, losses=1, renewers=(2,),
               note='N=3, two concurrent proposers, one memory lost at any point'),
    'C1c': dict(n=3, proposers=(0, 1), rounds=2, losses=1, crashes=1, renewers=(0,),
                note='C1 with a proposer crash as well, the lease on a proposer\'s node'),
    'C2q': dict(n=3, proposers=(0, 1, 2), rounds=2, max_choices=2, early='must',
                note='N=3, three proposers, two rounds each, no fault, no lease; a '
                'phase ends as soon as a quorum of disks is complete'),
    'C2w': dict(n=3, proposers=(0, 1, 2), rounds=2, max_choices=1, early='never',
                note='C2q with three different views, every phase visiting every disk'),
    'C2L': dict(n=3, proposers=(0, 1, 2), rounds=1, losses=1, renewers=(2,), max_choices=1,
                note='N=3, three proposers, one round each, one memory lost'),
    'C3': dict(n=3, proposers=(0, 2), rounds=2, cut=2, renewers=(2,),
               note='N=3, node 2 cut off at any point, proposing and renewing on'),
    'C3b': dict(n=3, proposers=(0, 2), rounds=1, cut=2, renewers=(0, 2),
                note='C3 with one round and leases on both sides of the cut'),
    'C4': dict(n=5, proposers=(0, 1), rounds=2, losses=2, max_choices=1,
               note='N=5, two proposers with different views, two rounds, two '
               'memories lost, no lease'),
    'C4s': dict(n=5, proposers=(0, 1), rounds=1, losses=2, renewers=(4,), max_suspects=2,
                max_choices=2, note='N=5, one round, two losses, a lease on node 4, '
                'suspicions of one or two nodes'),
    'J1': dict(n=4, view0='AAAL', proposers=(0, 1), rounds=2, losses=1, joins=((1, 3),),
               renewers=(2,), note='members 0-2, node 3 lost; p1 proposes its join'),
    'T1': dict(n=3, proposers=(0, 1), rounds=2, losses=1, crashes=1, takeover=(1,),
               renewers=(1,), note='p1 proposes only as a takeover, after its '
               'renewal met a ballot; p0 may crash or be lost mid-instance'),
    'T0': dict(n=3, proposers=(0, 1), rounds=2, losses=1, crashes=1, takeover=(1,),
               renewers=(), note='T1 without the takeover trigger (node 1 never renews, '
               'so it never proposes): shows the blocked states'),
}

# mutant: (base configuration, flags)
SMALL = dict(n=3, proposers=(0, 1), rounds=2)
CONFIGS['M2'] = dict(SMALL, note='small base for the agreement mutants')
CONFIGS['M2L'] = dict(SMALL, losses=1, note='small base with one loss')
CONFIGS['M1'] = dict(n=3, proposers=(0,), rounds=1, renewers=(2,),
                     note='small base for the timing mutants')
MUTANTS = {
    'a-no-reread': ('M2', ('no-reread',)),
    'b-own-value': ('M2', ('own-value',)),
    'c-quorum1': ('M2', ('quorum1',)),
    'd-drain-L': ('M1', ('drain-L',)),
    'd0-no-drain': ('M1', ('no-drain',)),
    'e-lease-end': ('M1', ('lease-end',)),
    'f-amnesia': ('M2L', ('amnesia',)),
}
CLEAN = ['C1', 'C1c', 'C2q', 'C2w', 'C2L', 'C3', 'C3b', 'C4', 'C4s', 'J1', 'T1', 'T0', 'M2', 'M2L', 'M1']


def main(argv):
    what = argv[1] if len(argv) > 1 else 'all'
    limit = float(argv[2]) if len(argv) > 2 else 900
    names = CLEAN if what == 'all' else (
        list(MUTANTS) if what == 'mutants' else what.split(','))
    failed = []
    rows = []
    for name in names:
        if name in CONFIGS:
            cfg = Config(name, **CONFIGS[name])
            res = report(explore(cfg, limit))
            ok = res['exhaustive']
            stuck = sum(res['stuck'][0].values()) if res.get('stuck') else 0
            result = 'clean' if ok else ('time limit' if res['limit'] else 'VIOLATION')
            rows.append((name, res['states'], res['depth'], result, res['time'],
                         'no decision reachable from %d' % stuck if stuck else ''))
        else:
            base, flags = MUTANTS[name]
            kw = dict(CONFIGS[base])
            kw['mutants'] = flags
            cfg = Config(name, **kw)
            res = report(explore(cfg, limit, liveness=False))
            ok = bool(res['violation'])
            rows.append((name, res['states'], res['depth'],
                         res['violation'][1].split(':')[0] if ok else 'NOT CAUGHT',
                         res['time'], 'on %s, counterexample of %d steps' % (
                             base, trace(res, res['violation'][0])[1]) if ok else ''))
        if not ok:
            failed.append(name)
        print(flush=True)
    print('| config | states | max depth | result | seconds | |')
    print('|---|---:|---:|---|---:|---|')
    for name, n, dep, result, secs, extra in rows:
        print('| %s | %s | %d | %s | %.1f | %s |' % (name, format(n, ','), dep, result, secs, extra))
    if failed:
        print('FAILED: ' + ', '.join(failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
