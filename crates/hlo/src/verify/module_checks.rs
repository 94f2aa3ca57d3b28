//! The verifier's module-level checks, run once after every computation has been checked:
//! computations that nothing calls, the entry computation layout, input/output aliases, the
//! schedule, channel ids, and layout-constrained all-reduces.

use super::*;

impl<'a> Verifier<'a> {
    pub(super) fn check_reachability(&mut self) {
        if self.opts.allow_dangling_computations {
            return;
        }
        let m = self.m;
        let Some(entry) = m.entry() else { return };
        let mut seen = HashSet::new();
        let mut stack = vec![entry];
        while let Some(c) = stack.pop() {
            if !seen.insert(c) || m.try_comp(c).is_none() {
                continue;
            }
            for &i in m.comp(c).instructions() {
                stack.extend(m.instr(i).called.iter().copied());
            }
        }
        for &c in m.computations() {
            if !seen.contains(&c) {
                self.err_comp(
                    c,
                    "the computation is not the entry and is not called from the entry computation (dangling)",
                );
            }
        }
    }

    pub(super) fn check_entry_layout(&mut self) {
        let m = self.m;
        let Some(entry) = m.entry() else { return };
        let Some(layout) = &m.config.entry_computation_layout else {
            return;
        };
        let sig = self.signature(entry);
        if layout.parameters.len() != sig.parameters.len() {
            self.err_comp(
                entry,
                format!(
                    "entry_computation_layout has {} parameters but the entry computation has {}",
                    layout.parameters.len(),
                    sig.parameters.len()
                ),
            );
        } else {
            for (k, (l, p)) in layout.parameters.iter().zip(&sig.parameters).enumerate() {
                if !compatible(l, p, false) {
                    self.err_comp(
                        entry,
                        format!(
                            "entry parameter {} is {} but entry_computation_layout says {}",
                            k,
                            shape_str(p),
                            shape_str(l)
                        ),
                    );
                }
            }
        }
        if !compatible(&layout.result, &sig.result, false) {
            self.err_comp(
                entry,
                format!(
                    "the entry root is {} but entry_computation_layout says {}",
                    shape_str(&sig.result),
                    shape_str(&layout.result)
                ),
            );
        }
        for (k, l) in layout.parameters.iter().chain([&layout.result]).enumerate() {
            let mut bad = false;
            l.for_each_subshape(|_, s| {
                if let Shape::Array(a) = s {
                    if let Some(lay) = &a.layout {
                        if lay.minor_to_major.len() != a.rank() || !is_perm(&lay.minor_to_major) {
                            bad = true;
                        }
                    }
                }
            });
            if bad {
                self.err_comp(
                    entry,
                    format!(
                        "entry_computation_layout shape {k} has an invalid layout: {}",
                        shape_str(l)
                    ),
                );
            }
        }
    }

    pub(super) fn check_aliases(&mut self) {
        let m = self.m;
        let Some(entry) = m.entry() else { return };
        let sig = self.signature(entry);
        let mut seen_params = HashSet::new();
        let to_idx = |v: &[i64]| -> Option<Vec<usize>> {
            v.iter().map(|&x| usize::try_from(x).ok()).collect()
        };
        for a in &m.config.input_output_alias {
            let out_ok =
                to_idx(&a.output_index).is_some_and(|ix| sig.result.subshape(&ix).is_some());
            if !out_ok {
                self.err_module(format!(
                    "input_output_alias names output index {:?}, which is not in the result {}",
                    a.output_index,
                    shape_str(&sig.result)
                ));
            }
            let p = usize::try_from(a.parameter_number)
                .ok()
                .and_then(|p| sig.parameters.get(p));
            match p {
                None => self.err_module(format!(
                    "input_output_alias names parameter {}, but the entry has {} parameters",
                    a.parameter_number,
                    sig.parameters.len()
                )),
                Some(ps) => {
                    if to_idx(&a.parameter_index).is_none_or(|ix| ps.subshape(&ix).is_none()) {
                        self.err_module(format!(
                            "input_output_alias names index {:?} of parameter {}, which is not in {}",
                            a.parameter_index,
                            a.parameter_number,
                            shape_str(ps)
                        ));
                    }
                }
            }
            // XLA's rule: an aliased input and output share one buffer, so their sizes agree.
            let out = to_idx(&a.output_index).and_then(|ix| sig.result.subshape(&ix));
            let input = usize::try_from(a.parameter_number)
                .ok()
                .and_then(|p| sig.parameters.get(p))
                .zip(to_idx(&a.parameter_index))
                .and_then(|(ps, ix)| ps.subshape(&ix));
            if let (Some(Shape::Array(o)), Some(Shape::Array(i))) = (out, input) {
                if o.byte_size() != i.byte_size() {
                    self.err_module(format!(
                        "input_output_alias pairs output {:?} ({}) with parameter {} index {:?} \
                         ({}): an alias shares one buffer, so both must have the same size",
                        a.output_index,
                        shape_str(&Shape::Array(o.clone())),
                        a.parameter_number,
                        a.parameter_index,
                        shape_str(&Shape::Array(i.clone()))
                    ));
                }
            }
            if !seen_params.insert((a.parameter_number, a.parameter_index.clone())) {
                self.err_module(format!(
                    "parameter {} index {:?} is aliased to more than one output",
                    a.parameter_number, a.parameter_index
                ));
            }
        }
        for d in &m.config.buffer_donor {
            let p = usize::try_from(d.parameter_number)
                .ok()
                .and_then(|p| sig.parameters.get(p));
            let ok = p.is_some_and(|ps| {
                to_idx(&d.parameter_index).is_some_and(|ix| ps.subshape(&ix).is_some())
            });
            if !ok {
                self.err_module(format!(
                    "buffer_donor names parameter {} index {:?}, which does not exist",
                    d.parameter_number, d.parameter_index
                ));
            }
            if seen_params.contains(&(d.parameter_number, d.parameter_index.clone())) {
                self.err_module(format!(
                    "parameter {} index {:?} is both aliased and a buffer donor",
                    d.parameter_number, d.parameter_index
                ));
            }
        }
    }

    pub(super) fn check_schedule(&mut self) {
        let m = self.m;
        let Some(schedule) = &m.schedule else { return };
        for (&c, seq) in &schedule.sequences {
            if m.try_comp(c).is_none() {
                self.err_module(format!(
                    "the schedule has a sequence for a removed computation ({c})"
                ));
                continue;
            }
            let comp = m.comp(c);
            let mut pos: HashMap<InstrId, usize> = HashMap::new();
            for (k, &i) in seq.iter().enumerate() {
                match m.try_instr(i) {
                    Some(x) if x.parent == c => {
                        if pos.insert(i, k).is_some() {
                            self.err_instr(i, "appears more than once in the schedule");
                        }
                    }
                    Some(_) => self.err_comp(
                        c,
                        format!(
                            "the schedule lists %{}, which belongs to another computation",
                            m.instr(i).name
                        ),
                    ),
                    None => self.err_comp(c, "the schedule lists a removed instruction"),
                }
            }
            for &i in comp.instructions() {
                if !pos.contains_key(&i) {
                    self.err_instr(i, "is missing from the schedule");
                }
            }
            for &i in comp.instructions() {
                let Some(&pi) = pos.get(&i) else { continue };
                let ins = m.instr(i);
                for (&o, kind) in ins.operands().iter().map(|o| (o, "operand")).chain(
                    ins.control_predecessors()
                        .iter()
                        .map(|o| (o, "control predecessor")),
                ) {
                    if let Some(&po) = pos.get(&o) {
                        if po >= pi {
                            self.err_instr(
                                i,
                                format!("is scheduled before its {} %{}", kind, m.instr(o).name),
                            );
                        }
                    }
                }
            }
        }
        for &c in m.computations() {
            if !self.fusion_comps.contains(&c) && !schedule.sequences.contains_key(&c) {
                self.err_comp(
                    c,
                    "the module is scheduled but this computation has no sequence",
                );
            }
        }
    }

    pub(super) fn check_channels(&mut self) {
        let m = self.m;
        let mut by_channel: HashMap<i64, Vec<InstrId>> = HashMap::new();
        let mut order = Vec::new();
        for &c in m.computations() {
            for &i in m.comp(c).instructions() {
                let ins = m.instr(i);
                let Some(ch) = ins.attrs.channel_id else {
                    continue;
                };
                if !by_channel.contains_key(&ch) {
                    order.push(ch);
                }
                by_channel.entry(ch).or_default().push(i);
                if matches!(ins.opcode, Opcode::Send | Opcode::Recv) && ins.users().len() == 1 {
                    let u = m.instr(ins.users()[0]);
                    if matches!(u.opcode, Opcode::SendDone | Opcode::RecvDone) {
                        if u.attrs.channel_id != ins.attrs.channel_id {
                            self.err_instr(
                                i,
                                format!(
                                    "has channel id {:?} but its {} %{} has {:?}",
                                    ins.attrs.channel_id, u.opcode, u.name, u.attrs.channel_id
                                ),
                            );
                        }
                        if u.attrs.is_host_transfer != ins.attrs.is_host_transfer {
                            self.err_instr(
                                i,
                                format!(
                                    "and its {} %{} disagree on is_host_transfer",
                                    u.opcode, u.name
                                ),
                            );
                        }
                    }
                }
            }
        }
        let send_recv = |o: Opcode| {
            matches!(
                o,
                Opcode::Send | Opcode::Recv | Opcode::SendDone | Opcode::RecvDone
            )
        };
        for ch in order {
            let v = &by_channel[&ch];
            let first = m.instr(v[0]).opcode;
            if send_recv(first) && v.iter().any(|&i| !send_recv(m.instr(i).opcode)) {
                self.err_module(format!(
                    "channel {ch} is used by send/recv and by other kinds of instructions"
                ));
            }
        }
    }

    pub(super) fn check_layout_constrained_all_reduce(&mut self) {
        let m = self.m;
        let mut first: Option<bool> = None;
        for &c in m.computations() {
            for &i in m.comp(c).instructions() {
                let ins = m.instr(i);
                if !matches!(ins.opcode, Opcode::AllReduce | Opcode::AllReduceStart) {
                    continue;
                }
                match first {
                    None => first = Some(ins.attrs.constrain_layout),
                    Some(f) if f != ins.attrs.constrain_layout => {
                        self.err_module(
                            "the module mixes layout-constrained and unconstrained all-reduces",
                        );
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
}
