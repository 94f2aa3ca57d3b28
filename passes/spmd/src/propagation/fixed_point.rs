//! The `Propagator`'s state and its fixed point: building the per-instruction tables,
//! the sweeps at each aggressiveness level, the "already inferred" caches that make a sweep
//! touch only instructions next to a change, and the rule that a sharding only ever gets more
//! specific (`improve`). Also which instructions may take a sharding at all.

use super::*;

impl<'m> Propagator<'m> {
    pub(super) fn new(
        m: &'m Module,
        entry: CompId,
        o: &PropagationOptions,
        flags: &Flags,
    ) -> Propagator<'m> {
        let cap = m.instr_capacity();
        let memo = memo::Memo::default();
        let mut sh: Vec<Option<Sh>> = vec![None; cap];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                sh[id.index()] = memo.intern_opt(i.sharding.as_ref().map(|s| expand(&i.shape, s)));
            }
        }
        let original: Vec<Option<Sharding>> = (0..cap)
            .map(|k| {
                m.try_instr(InstrId::new(k))
                    .and_then(|i| i.sharding.clone())
            })
            .collect();
        let mut p = Propagator {
            m,
            entry,
            entry_root: m.comp(entry).root(),
            allow_output: flags.output_any,
            spmd: o.is_spmd,
            params_any: flags.params_any,
            param_flags: flags.params.clone(),
            sh,
            original,
            provided: vec![false; cap],
            unspecified: vec![None; cap],
            caller: vec![None; m.comp_capacity()],
            orders: Vec::new(),
            order_of: vec![usize::MAX; m.comp_capacity()],
            pending: std::collections::BTreeSet::new(),
            done_fwd: vec![false; cap],
            done_bwd: vec![false; cap],
            facts: vec![0; cap],
            changed_at: vec![0; cap],
            fwd_seen: vec![(0, 0); cap],
            bwd_seen: vec![(0, 0); cap],
            clock: 1,
            wide: Default::default(),
            memo,
            iterations: 0,
            from_operands: 0,
            from_users: 0,
        };
        p.build_computation_map();
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                p.facts[id.index()] = p.compute_facts(id);
            }
        }
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let mut f = p.facts[id.index()];
                if p.supports_partitioning_uncached(id, p.allow_output, false) {
                    f |= PARTITIONABLE_FWD;
                }
                if p.supports_partitioning_uncached(id, false, p.params_any) {
                    f |= PARTITIONABLE_BWD;
                }
                p.facts[id.index()] = f;
                let ops = m.instr(id).operands();
                if ops.len() > WIDE {
                    let mut index: Vec<(InstrId, u32, bool)> = Vec::with_capacity(ops.len());
                    for (k, &o) in ops.iter().enumerate() {
                        index.push((o, k as u32, false));
                    }
                    index.sort();
                    // Keep the first position of each operand, noting repeats.
                    let mut dedup: Vec<(InstrId, u32, bool)> = Vec::with_capacity(index.len());
                    for e in index {
                        match dedup.last_mut() {
                            Some(last) if last.0 == e.0 => last.2 = true,
                            _ => dedup.push(e),
                        }
                    }
                    p.wide.insert(id, dedup);
                }
            }
        }
        // Annotations the pass may not change (XLA's `provided_shardings`): every sharding but
        // those of parameters and the entry root, and `{unknown}` ones; the entry root when the
        // output may not take a sharding; entry parameters when none may.
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                let Some(s) = p.sh[id.index()].as_ref() else {
                    continue;
                };
                if Some(id) != p.entry_root && i.opcode() != Opcode::Parameter && !has_unknown(s) {
                    p.provided[id.index()] = true;
                }
            }
        }
        if let Some(r) = p.entry_root {
            if !p.allow_output && !p.cur(r).is_some_and(has_unknown) {
                p.provided[r.index()] = true;
            }
        }
        if !p.params_any {
            for k in 0..m.comp(entry).num_parameters() {
                if let Some(id) = m.comp(entry).parameter(k) {
                    if p.sh[id.index()].as_ref().is_some_and(|s| !has_unknown(s)) {
                        p.provided[id.index()] = true;
                    }
                }
            }
        }
        // `{unknown}` takes part as `{replicated}`.
        for k in 0..cap {
            if let Some(s) = p.sh[k].as_ref().filter(|s| has_unknown(s)) {
                let mut s = s.to_sharding();
                replace_unknown(&mut s);
                p.put(InstrId::new(k), Some(p.memo.intern(s)));
            }
        }
        let mut orders = analysis::PostOrders::new(m);
        for &c in m.computations() {
            p.order_of[c.index()] = p.orders.len();
            p.orders.push((c, orders.post_order(m, c)));
        }
        p
    }

    pub(super) fn build_computation_map(&mut self) {
        let m = self.m;
        let mut calls: Vec<usize> = vec![0; m.comp_capacity()];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                for &callee in &m.instr(id).called {
                    calls[callee.index()] += 1;
                }
            }
        }
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                match i.opcode() {
                    Opcode::While | Opcode::Conditional | Opcode::Call => {}
                    _ => continue,
                }
                // A computation called from several places gets no caller: its shardings
                // could not follow one call site.
                if i.called.iter().any(|c| calls[c.index()] != 1) {
                    continue;
                }
                // Related instructions share one sharding: copy the first one found.
                let related = self.related(id);
                if let Some(s) = related.iter().find_map(|&r| self.sh[r.index()].clone()) {
                    for &r in &related {
                        self.put(r, Some(s.clone()));
                    }
                }
                match i.opcode() {
                    Opcode::While => {
                        // Only the body (XLA's computation map): the condition's parameter
                        // follows the loop through `related`, the rest of the condition
                        // propagates as a computation of its own.
                        if let Some(b) = i.while_body() {
                            self.caller[b.index()] = Some(id);
                        }
                    }
                    _ => {
                        for &callee in &i.called {
                            self.caller[callee.index()] = Some(id);
                        }
                    }
                }
            }
        }
    }

    /// Instructions that must share one sharding with a while, conditional or call.
    pub(super) fn related(&self, id: InstrId) -> SmallVec<[InstrId; 4]> {
        let m = self.m;
        let i = m.instr(id);
        let mut v: SmallVec<[InstrId; 4]> = SmallVec::new();
        v.push(id);
        match i.opcode() {
            Opcode::While => {
                if let Some(b) = i.while_body() {
                    v.extend(m.comp(b).root());
                    v.extend(m.comp(b).parameter(0));
                }
                if let Some(c) = i.while_condition() {
                    v.extend(m.comp(c).parameter(0));
                }
            }
            Opcode::Conditional | Opcode::Call => {
                for &c in &i.called {
                    v.extend(m.comp(c).root());
                }
            }
            _ => {}
        }
        v
    }

    /// True for a while/conditional/call whose bodies the computation map ties to it.
    pub(super) fn is_mapped_caller(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        match i.opcode() {
            Opcode::While => i
                .while_body()
                .is_some_and(|b| self.caller[b.index()] == Some(id)),
            Opcode::Conditional | Opcode::Call => {
                !i.called.is_empty() && i.called.iter().all(|c| self.caller[c.index()] == Some(id))
            }
            _ => false,
        }
    }

    pub(super) fn cur(&self, id: InstrId) -> Option<&Sharding> {
        self.sh[id.index()].as_deref()
    }

    /// The current sharding's handle.
    pub(super) fn cur_sh(&self, id: InstrId) -> Option<&Sh> {
        self.sh[id.index()].as_ref()
    }

    /// Sets `id`'s sharding.
    pub(super) fn set(&mut self, id: InstrId, s: Sharding) {
        let s = self.memo.intern(s);
        self.put(id, Some(s));
    }

    /// Sets (or clears) `id`'s sharding, noting when it changed (see `changed_at`).
    pub(super) fn put(&mut self, id: InstrId, v: Option<Sh>) {
        if self.sh[id.index()] != v {
            self.changed_at[id.index()] = self.clock;
            self.clock += 1;
            self.sh[id.index()] = v;
        }
    }

    pub(super) fn sp(&self, id: InstrId) -> bool {
        self.cur(id).is_some_and(Sharding::is_spatially_partitioned)
    }

    pub(super) fn shape(&self, id: InstrId) -> &'m Shape {
        &self.m.instr(id).shape
    }

    pub(super) fn is_root(&self, id: InstrId) -> bool {
        self.facts[id.index()] & IS_ROOT != 0
    }

    pub(super) fn non_root_users_is_one(&self, id: InstrId) -> bool {
        self.facts[id.index()] & ONE_NON_ROOT_USER != 0
    }

    /// The facts about instruction `id` that do not change during the pass (see `facts`).
    pub(super) fn compute_facts(&self, id: InstrId) -> u8 {
        let m = self.m;
        let i = m.instr(id);
        let root = m.comp(i.parent()).root();
        let mut f = 0;
        if root == Some(id) {
            f |= IS_ROOT;
        }
        if i.users().iter().filter(|&&u| Some(u) != root).count() == 1 {
            f |= ONE_NON_ROOT_USER;
        }
        if i.shape.is_tuple() && i.shape.tuple_elements().iter().all(|e| !e.is_tuple()) {
            f |= FLAT_TUPLE;
        }
        use Opcode::*;
        let non_local = |op: Opcode| {
            matches!(
                op,
                Dot | Convolution | Gather | Scatter | Parameter | CustomCall | Call | Conditional
            )
        };
        if !non_local(i.opcode()) {
            f |= LOCAL_FWD;
        }
        let user_ops: SmallVec<[Opcode; 4]> =
            i.users().iter().map(|&u| m.instr(u).opcode()).collect();
        if i.opcode() != CustomCall
            && !user_ops
                .iter()
                .any(|&op| matches!(op, Gather | Scatter | CustomCall | Call | Conditional))
        {
            f |= LOCAL_BWD;
        }
        if i.opcode() == Broadcast || user_ops.contains(&Broadcast) {
            f |= BROADCAST_NEAR;
        }
        f
    }

    /// `sub_sharding(s, shape of user, index)`: the sharding of element `index` of `user`'s
    /// value sharded `s`.
    pub(super) fn element_of(&self, s: &Sh, user: InstrId, index: usize) -> Sh {
        let shape = self.shape(user);
        let elem = shape.tuple_elements().get(index);
        if !s.is_tuple() && !elem.is_some_and(Shape::is_tuple) {
            return s.clone();
        }
        let (start, len) = if self.facts[user.index()] & FLAT_TUPLE != 0 {
            (index, usize::from(index < shape.tuple_elements().len()))
        } else {
            leaf_range(shape, index)
        };
        let kind = match elem {
            None => 0,
            Some(e) if e.is_tuple() => 2,
            Some(_) => 1,
        };
        self.memo
            .algebra(s, Op::Element { start, len, kind }, |s, _| {
                Some(element_sharding(s, start, len, kind))
            })
            .expect("an element always has a sharding")
    }

    /// Where `id` first stands among `user`'s operands, and whether it stands there more than
    /// once (wide users, like a model's output tuple, are looked up in a sorted index).
    pub(super) fn operand_position(&self, id: InstrId, user: InstrId) -> Option<(usize, bool)> {
        let ops = self.m.instr(user).operands();
        if ops.len() <= WIDE {
            let first = ops.iter().position(|&o| o == id)?;
            return Some((first, ops[first + 1..].contains(&id)));
        }
        let index = self.wide.get(&user)?;
        let k = index.partition_point(|&(o, _, _)| o < id);
        let &(o, first, more) = index.get(k)?;
        (o == id).then_some((first as usize, more))
    }

    // ----- the driver -----

    pub(super) fn run(&mut self) {
        for level in 0..4u8 {
            self.run_level(level);
        }
        // XLA runs the last level once more, with fresh caches, after its shard-group
        // alignment (which this pass does not have); it can still change a few shardings.
        self.run_level(3);
    }

    pub(super) fn clear_cache(&mut self, id: InstrId, for_users: Option<InstrId>) {
        let m = self.m;
        self.mark_pending(m.instr(id).parent());
        for &op in m.instr(id).operands() {
            self.done_bwd[op.index()] = false;
        }
        let source = for_users.unwrap_or(id);
        self.mark_pending(m.instr(source).parent());
        for &u in m.instr(source).users() {
            self.done_fwd[u.index()] = false;
            // The parameters of what the user calls see the new sharding too.
            for &c in &m.instr(u).called {
                self.mark_pending(c);
                for k in 0..m.comp(c).num_parameters() {
                    if let Some(p) = m.comp(c).parameter(k) {
                        self.done_fwd[p.index()] = false;
                    }
                }
            }
        }
    }

    pub(super) fn mark_pending(&mut self, c: CompId) {
        if let Some(&k) = self.order_of.get(c.index()).filter(|&&k| k != usize::MAX) {
            self.pending.insert(k);
        }
    }

    pub(super) fn run_level(&mut self, level: u8) {
        self.done_fwd.iter_mut().for_each(|x| *x = false);
        self.done_bwd.iter_mut().for_each(|x| *x = false);
        let may_merge = self.spmd && level > 0;
        let orders = std::mem::take(&mut self.orders);
        // Computations walked every round: a partial annotation is refined on every visit,
        // and a manual conversion re-opens the annotation before it.
        let always: Vec<usize> = orders
            .iter()
            .enumerate()
            .filter(|(_, (_, order))| {
                order.iter().any(|&id| {
                    let i = self.m.instr(id);
                    (self.provided[id.index()] && self.unspecified[id.index()].is_some())
                        || is_custom_call(i, "SPMDFullToShardShape")
                        || is_custom_call(i, "SPMDShardToFullShape")
                })
            })
            .map(|(k, _)| k)
            .collect();
        self.pending = (0..orders.len()).collect();
        let mut changed_last = true;
        while changed_last {
            changed_last = false;
            self.iterations += 1;
            self.pending.extend(always.iter().copied());
            // In `orders` order, as a walk of all of them would go; a computation marked
            // again after its walk waits for the next round.
            let mut from = 0;
            while let Some(&k) = self.pending.range(from..).next() {
                self.pending.remove(&k);
                from = k + 1;
                let order = &orders[k].1;
                for &id in order {
                    if self.done_fwd[id.index()] {
                        continue;
                    }
                    if self.provided[id.index()] {
                        if !may_merge {
                            continue;
                        }
                        if let Some(dims) = self.unspecified[id.index()].clone() {
                            if self.refine_unspecified_from_operand(id, &dims) {
                                self.from_operands += 1;
                                self.done_fwd[id.index()] = true;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_fwd[id.index()] = true;
                    if self.may_skip_fwd(id, level) {
                        if cfg!(debug_assertions) {
                            let before = self.sh[id.index()].clone();
                            let changed = self.infer_from_operands(id, level);
                            assert!(
                                !changed && self.sh[id.index()] == before,
                                "sharding-propagation: skipped forward visit of %{} would change it",
                                self.m.instr(id).name()
                            );
                        }
                        continue;
                    }
                    self.fwd_seen[id.index()] = (self.clock, self.fwd_class(id, level));
                    if self.infer_from_operands(id, level) {
                        self.from_operands += 1;
                        let changed = self.computation_propagation(id);
                        self.clear_cache(id, None);
                        for c in changed {
                            self.clear_cache(c, None);
                        }
                        changed_last = true;
                    }
                }
                for &id in order.iter().rev() {
                    // A manual conversion is refined together with the annotation before it:
                    // when the conversion is to be revisited, so is the annotation.
                    let i = self.m.instr(id);
                    if !self.done_bwd[id.index()]
                        && (is_custom_call(i, "SPMDFullToShardShape")
                            || is_custom_call(i, "SPMDShardToFullShape"))
                    {
                        if let Some(&op) = i.operands().first() {
                            self.done_bwd[op.index()] = false;
                        }
                    }
                    if self.done_bwd[id.index()] {
                        continue;
                    }
                    if self.provided[id.index()] {
                        if !may_merge {
                            continue;
                        }
                        if let Some(dims) = self.unspecified[id.index()].clone() {
                            if self.refine_unspecified_from_users(id, &dims, level) {
                                self.from_users += 1;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_bwd[id.index()] = true;
                    if self.may_skip_bwd(id, level) {
                        if cfg!(debug_assertions) {
                            let before = self.sh[id.index()].clone();
                            let changed = self.infer_from_users(id, level);
                            assert!(
                                !changed && self.sh[id.index()] == before,
                                "sharding-propagation: skipped backward visit of %{} would change it",
                                self.m.instr(id).name()
                            );
                        }
                        continue;
                    }
                    self.bwd_seen[id.index()] = (self.clock, self.bwd_class(id, level));
                    if self.infer_from_users(id, level) {
                        self.from_users += 1;
                        let changed = self.computation_propagation(id);
                        self.clear_cache(id, None);
                        for c in changed {
                            self.clear_cache(c, None);
                        }
                        changed_last = true;
                    }
                }
            }
        }
        self.orders = orders;
    }

    /// Levels at which inferring `id` from its operands follows the same rules: 0; and 1-3,
    /// except for a broadcast, whose every level is its own class: at level 1 it is not
    /// inferred at all (`can_propagate_at`), at 2 it takes only a manual sharding, at 3 its
    /// operand's too.
    pub(super) fn fwd_class(&self, id: InstrId, level: u8) -> u8 {
        match level {
            0 => 0,
            _ if self.m.instr(id).opcode() == Opcode::Broadcast => level,
            _ => 1,
        }
    }

    /// Levels at which inferring `id` from its users follows the same rules: 0; 1-3, except
    /// that broadcasts (`id` or a user) take part only from level 2.
    pub(super) fn bwd_class(&self, id: InstrId, level: u8) -> u8 {
        match level {
            0 => 0,
            1 if self.facts[id.index()] & BROADCAST_NEAR != 0 => 1,
            _ => 2,
        }
    }

    /// True when inferring `id` from its operands now would repeat its last such visit
    /// exactly: the rules are those of the same level class, and neither `id`'s sharding nor
    /// an operand's changed since. Only for ops whose rule reads nothing else (dots look ahead
    /// at users, gathers and scatters at iotas, parameters at their caller; custom calls are
    /// left alone).
    pub(super) fn may_skip_fwd(&self, id: InstrId, level: u8) -> bool {
        let (seen, class) = self.fwd_seen[id.index()];
        if seen == 0
            || self.facts[id.index()] & LOCAL_FWD == 0
            || class != self.fwd_class(id, level)
            || self.changed_at[id.index()] >= seen
        {
            return false;
        }
        let ops = self.m.instr(id).operands();
        ops.iter().all(|o| self.changed_at[o.index()] < seen)
    }

    /// [`Self::may_skip_fwd`] for inferring from users: neither `id`, nor a user, nor another
    /// operand of a user (dots, reduces) changed since the last visit; no user reads anything
    /// else (calls and conditionals read their callees, gathers and scatters iotas).
    pub(super) fn may_skip_bwd(&self, id: InstrId, level: u8) -> bool {
        let (seen, class) = self.bwd_seen[id.index()];
        if seen == 0
            || self.facts[id.index()] & LOCAL_BWD == 0
            || class != self.bwd_class(id, level)
            || self.changed_at[id.index()] >= seen
        {
            return false;
        }
        let m = self.m;
        m.instr(id).users().iter().all(|&u| {
            let ui = m.instr(u);
            self.changed_at[u.index()] < seen
                && (ui.opcode() == Opcode::Tuple
                    || ui
                        .operands()
                        .iter()
                        .all(|o| self.changed_at[o.index()] < seen))
        })
    }

    /// After `id` changed: when it is a while/conditional/call, or a parameter or root of a
    /// computation one of those calls, every related instruction takes its sharding (XLA's
    /// `maybe_computation_propagation`, which overrides provided shardings too); a parameter
    /// of a conditional branch also passes its sharding to the conditional's operand for it.
    pub(super) fn computation_propagation(&mut self, id: InstrId) -> Vec<InstrId> {
        let i = self.m.instr(id);
        let called_edge = (i.opcode() == Opcode::Parameter || self.is_root(id))
            && self.caller[i.parent().index()].is_some();
        if !called_edge && !self.is_mapped_caller(id) {
            // Nothing is tied to `id`.
            return Vec::new();
        }
        let mut changed = Vec::new();
        let mut work = vec![id];
        while let Some(x) = work.pop() {
            let i = self.m.instr(x);
            let mut groups: SmallVec<[SmallVec<[InstrId; 4]>; 2]> = SmallVec::new();
            if self.is_mapped_caller(x) {
                groups.push(self.related(x));
            }
            if i.opcode() == Opcode::Parameter || self.is_root(x) {
                if let Some(c) = self.caller[i.parent().index()] {
                    groups.push(self.related(c));
                    let ci = self.m.instr(c);
                    if i.opcode() == Opcode::Parameter && ci.opcode() == Opcode::Conditional {
                        if let Some(b) = ci.called.iter().position(|&k| k == i.parent()) {
                            if let Some(&op) = ci.operands().get(b + 1) {
                                groups.push(SmallVec::from_slice(&[x, op]));
                            }
                        }
                    }
                }
            }
            let Some(s) = self.sh[x.index()].clone() else {
                continue;
            };
            for related in groups {
                if !related.contains(&x) {
                    continue;
                }
                for r in related {
                    if self.sh[r.index()].as_ref() != Some(&s) {
                        self.put(r, Some(s.clone()));
                        changed.push(r);
                        work.push(r);
                    }
                }
            }
        }
        changed
    }

    /// XLA's `MaybeImproveInstructionSharding` (`ReturnImprovedShardingImpl`): a manual
    /// sharding replaces a tile-maximal one; else a spatially partitioned candidate is taken
    /// when there is no sharding yet, or when it merges with the current one into something
    /// more specific (with as many tiles as the candidate only if each device's new piece lies
    /// inside its old one, unless `aggressive`).
    pub(super) fn improve(
        &mut self,
        id: InstrId,
        new: Sharding,
        may_combine: bool,
        aggressive: bool,
    ) -> bool {
        let new = self.memo.intern(new);
        self.improve_sh(id, new, may_combine, aggressive)
    }

    /// [`Self::improve`] with an interned candidate.
    pub(super) fn improve_sh(
        &mut self,
        id: InstrId,
        new: Sh,
        may_combine: bool,
        aggressive: bool,
    ) -> bool {
        match self.improved(id, new, may_combine, aggressive) {
            Some(s) => {
                self.put(id, Some(s));
                true
            }
            None => false,
        }
    }

    /// What [`Self::improve`] would set, without setting it (XLA's `ReturnImprovedSharding`).
    pub(super) fn improved(
        &self,
        id: InstrId,
        new: Sh,
        may_combine: bool,
        aggressive: bool,
    ) -> Option<Sh> {
        let old = self.cur_sh(id);
        // The same sharding again is no improvement (every rule below says so too; interned
        // handles are equal iff their values are).
        if old == Some(&new) {
            return None;
        }
        let shape = self.shape(id);
        if !fits(&new, shape) {
            return None;
        }
        if let Some(old) = old {
            if new.strictly_better_than(old) {
                return Some(new);
            }
        }
        if !new.is_spatially_partitioned() {
            // An empty tuple has one sharding, `{}`; XLA's output shows it set from a tuple
            // user though it is not spatially partitioned.
            let empty = matches!(&new.kind, ShardingKind::Tuple(e) if e.is_empty());
            if empty && shape.leaf_count() == 0 && old.is_none() {
                return Some(new);
            }
            return None;
        }
        let Some(old) = old else {
            return Some(new);
        };
        if new.is_manual() {
            return None;
        }
        let tiles = new.num_tiles();
        let (merged, new) = self.memo.merge_sharding(old, &new, may_combine);
        if !merged {
            return None;
        }
        if !aggressive
            && shape.is_array()
            && !old.is_tile_maximal()
            && new.num_tiles() == tiles
            && !self.memo.is_sub_tiling(shape, &new, old)
        {
            return None;
        }
        (new != *old).then_some(new)
    }

    // ----- which instructions may be sharded -----

    /// The flag of entry parameter `k` (one flag for all, one per parameter, or, for a single
    /// tuple parameter, one per element: then any).
    pub(super) fn param_flag(&self, k: usize) -> bool {
        let f = &self.param_flags;
        if f.len() == 1 {
            return f[0];
        }
        let n = self.m.comp(self.entry).num_parameters();
        if n == 1 && f.len() > 1 {
            return f.iter().any(|&b| b);
        }
        f.get(k).copied().unwrap_or(false)
    }

    /// May this parameter keep a sharding the pass gives it?
    pub(super) fn param_allowed(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        if self.caller[i.parent().index()].is_some() {
            return true;
        }
        i.parent() == self.entry && self.param_flag(i.attrs.parameter_number as usize)
    }

    /// XLA's `SupportSpatialPartitioning`: `allow_output` lets the entry root take a sharding,
    /// `allow_params` entry parameters (XLA allows both only when inferring from users).
    pub(super) fn supports_partitioning(
        &self,
        id: InstrId,
        allow_output: bool,
        allow_params: bool,
    ) -> bool {
        if (allow_output, allow_params) == (self.allow_output, false) {
            return self.facts[id.index()] & PARTITIONABLE_FWD != 0;
        }
        if (allow_output, allow_params) == (false, self.params_any) {
            return self.facts[id.index()] & PARTITIONABLE_BWD != 0;
        }
        self.supports_partitioning_uncached(id, allow_output, allow_params)
    }

    pub(super) fn supports_partitioning_uncached(
        &self,
        id: InstrId,
        allow_output: bool,
        allow_params: bool,
    ) -> bool {
        use Opcode::*;
        let i = self.m.instr(id);
        if self.is_root(id)
            && self.caller[i.parent().index()].is_none()
            && !(Some(id) == self.entry_root && allow_output)
        {
            return false;
        }
        if i.opcode().is_elementwise() || i.opcode() == Map {
            return i.opcode() != Rng || self.spmd;
        }
        match i.opcode() {
            Broadcast | Concatenate | Conditional | Constant | Convolution
            | OptimizationBarrier | Dot | DynamicSlice | DynamicUpdateSlice | Gather
            | GetTupleElement | Infeed | Iota | Pad | ReduceWindow | Reshape | Scatter
            | SelectAndScatter | Slice | Sort | Transpose | Tuple | While | Reduce
            | RngBitGenerator | Call | AllReduce | ReduceScatter => true,
            Reverse => self.spmd,
            Parameter => {
                self.caller[i.parent().index()].is_some()
                    || (i.parent() == self.entry && allow_params)
            }
            CustomCall => self.spmd && custom_call_is_shardable(i, self.m),
            _ => false,
        }
    }
}
