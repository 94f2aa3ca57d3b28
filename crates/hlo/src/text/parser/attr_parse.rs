//! The parser's attribute half: the value of each attribute an instruction's text gives
//! (`parse_attr`; the plain ones through the attribute table, `crate::attr_table`), and the
//! checks once all are read (`finish_attrs`: required attributes, called computations in
//! XLA's order).

use super::*;
use crate::attr_table::{self, AttrRow, Codec, DimsField, TextKind, Value};

impl<'a> Parser<'a> {
    pub(super) fn output_operand_aliasing(&mut self) -> PResult<Vec<OutputOperandAlias>> {
        self.c.expect(b'{', "to start output_to_operand_aliasing")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            let output_index = self.shape_index()?;
            self.c.expect(b':', "after the output shape index")?;
            self.c.expect(b'(', "before the operand number")?;
            let operand = self.c.int("an operand number")?;
            self.c.expect(b',', "after the operand number")?;
            let operand_index = self.shape_index()?;
            self.c.expect(b')', "to end the alias")?;
            v.push(OutputOperandAlias {
                output_index,
                operand,
                operand_index,
            });
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c
                .expect(b',', "or '}' in output_to_operand_aliasing")?;
        }
    }

    pub(super) fn enum_word(&mut self, what: &str) -> PResult<(usize, &'a str)> {
        self.c.skip_ws()?;
        let at = self.c.pos;
        let w = self.c.name(what)?;
        Ok((at, w))
    }

    pub(super) fn bad_enum<T>(&self, at: usize, what: &str, w: &str) -> PResult<T> {
        Err(self.c.error_at(at, format!("expected {what}, found '{w}'")))
    }

    /// Parses the value of a plain attribute (see `attr_table`) into its field.
    pub(super) fn parse_plain_attr(&mut self, row: &AttrRow, a: &mut Attrs) -> PResult<()> {
        let Codec::Plain { text, set, .. } = row.codec else {
            return Ok(());
        };
        let (at, v) = self.table_value(text, row.key)?;
        set(a, v).map_err(|e| self.c.error_at(at, format!("{}: {e}", row.key)))
    }

    /// Parses a value spelled as `text` says, for attribute `key`; with where it starts.
    fn table_value(&mut self, text: TextKind, key: &str) -> PResult<(usize, Value)> {
        self.c.skip_ws()?;
        let at = self.c.pos;
        let v = match text {
            TextKind::Int(what) => Value::Int(self.c.int(what)?),
            TextKind::Int32(what) => Value::Int(i64::from(self.c.int32(what)?)),
            TextKind::Bool => Value::Bool(self.bool_value()?),
            TextKind::Ints => Value::Ints(self.int_list(key)?),
            TextKind::F32 => {
                let (at, t) = self.c.number_text()?;
                Value::F32(t.parse::<f32>().map_err(|_| {
                    self.c
                        .error_at(at, format!("expected a number, found '{t}'"))
                })?)
            }
            TextKind::Str(what) => Value::Str(self.c.string(what)?),
        };
        Ok((at, v))
    }

    /// Parses `key` into its dimension-numbers family's struct if the family has that key;
    /// false if it has not.
    fn parse_dims_field<T: Default, P>(
        &mut self,
        family: &'static [DimsField<T, P>],
        key: &str,
        slot: &mut Option<Box<T>>,
    ) -> PResult<bool> {
        let Some(f) = attr_table::dims_field(family, key) else {
            return Ok(false);
        };
        let (at, v) = self.table_value(f.text, key)?;
        (f.set)(slot.get_or_insert_with(Box::default), v)
            .map_err(|e| self.c.error_at(at, format!("{key}: {e}")))?;
        Ok(true)
    }

    /// Parses `key` if it belongs to the dimension numbers of `op`; false if not.
    fn parse_dims_attr(&mut self, op: Opcode, key: &str, a: &mut Attrs) -> PResult<bool> {
        use attr_table::{DOT_DIMS, GATHER_DIMS, RAGGED_DOT_DIMS, SCATTER_DIMS};
        Ok(match op {
            Opcode::Dot | Opcode::ScaledDot => {
                self.parse_dims_field(DOT_DIMS, key, &mut a.dot_dims)?
            }
            Opcode::RaggedDot => {
                self.parse_dims_field(DOT_DIMS, key, &mut a.dot_dims)?
                    || self.parse_dims_field(RAGGED_DOT_DIMS, key, &mut a.ragged_dot_dims)?
            }
            Opcode::Gather => self.parse_dims_field(GATHER_DIMS, key, &mut a.gather_dims)?,
            Opcode::Scatter => self.parse_dims_field(SCATTER_DIMS, key, &mut a.scatter_dims)?,
            _ => false,
        })
    }

    /// Parses the value of attribute `key`; false if the opcode does not take it.
    pub(super) fn parse_attr(
        &mut self,
        instr: &mut Instruction,
        operands: &[InstrId],
        calls: &mut Calls,
        preds: &mut Vec<InstrId>,
        key: &str,
    ) -> PResult<bool> {
        use Opcode::*;
        let op = instr.opcode;
        // Attributes every instruction may carry.
        match key {
            "sharding" => {
                instr.sharding = Some(self.parse_sharding()?);
                return Ok(true);
            }
            "frontend_attributes" => {
                instr.frontend_attributes = self.parse_frontend_attributes()?;
                return Ok(true);
            }
            "statistics" => {
                instr.attrs.statistics_viz = Some(self.c.braced_raw("statistics")?.to_string());
                return Ok(true);
            }
            "parameter_replication" => {
                instr.attrs.parameter_replication = Some(self.bool_list_or_bool()?);
                return Ok(true);
            }
            "control-predecessors" => {
                *preds = self.instr_list()?;
                return Ok(true);
            }
            "origin" => {
                instr.attrs.original_value = Some(self.c.braced_raw("origin")?.to_string());
                return Ok(true);
            }
            "metadata" => {
                instr.metadata = Some(self.parse_metadata()?);
                return Ok(true);
            }
            "backend_config" => {
                let v = if self.c.peek()? == Some(b'{') {
                    self.c.braced_raw("backend_config")?.to_string()
                } else {
                    self.c.string("a string or {...}")?
                };
                // XLA prints no backend_config when it is empty.
                instr.backend_config = (!v.is_empty()).then_some(v);
                return Ok(true);
            }
            _ => {}
        }
        if let Some(row) = attr_table::plain_row(key, op) {
            self.parse_plain_attr(row, &mut instr.attrs)?;
            return Ok(true);
        }
        if self.parse_dims_attr(op, key, &mut instr.attrs)? {
            return Ok(true);
        }
        let a = &mut instr.attrs;
        let unary_accuracy = op.takes_result_accuracy();
        let collective = op.takes_replica_groups();
        match (key, op) {
            ("result_accuracy", _) if unary_accuracy => {
                a.result_accuracy = Some(self.parse_result_accuracy()?)
            }
            ("iota_dimension", Iota) => a.iota_dimension = self.c.int("a dimension")?,
            ("k", TopK) => a.k = self.c.int("k")?,
            ("is_stable", TopK) => a.is_stable = self.bool_value()?,
            ("largest", TopK) => a.largest = self.bool_value()?,
            ("replica_groups", _) if collective => {
                a.replica_groups = Some(Box::new(self.parse_replica_groups()?))
            }
            ("channel_id", _)
                if collective
                    || matches!(
                        op,
                        CollectivePermute
                            | CollectivePermuteStart
                            | Send
                            | SendDone
                            | Recv
                            | RecvDone
                    ) =>
            {
                a.channel_id = Some(self.c.int("a channel id")?)
            }
            (
                "dimensions",
                AllGather | AllGatherStart | ReduceScatter | AllToAll | RaggedAllToAll,
            ) => a.dimensions = Some(self.int_list("dimensions")?),
            (
                "constrain_layout",
                AllGather | AllGatherStart | AllReduce | AllReduceStart | ReduceScatter | AllToAll,
            ) => a.constrain_layout = self.bool_value()?,
            (
                "use_global_device_ids",
                AllGather | AllGatherStart | AllReduce | AllReduceStart | ReduceScatter,
            ) => a.use_global_device_ids = self.bool_value()?,
            ("mode", AllReduce | AllReduceStart | ReduceScatter) => {
                a.collective_mode = Some(self.c.name("a collective mode")?.to_string())
            }
            (
                "to_apply",
                AllReduce | AllReduceStart | ReduceScatter | Sort | Call | ReduceWindow | Map
                | Scan | Reduce | Scatter,
            ) => calls.to_apply = Some(self.comp_ref()?),
            ("source_target_pairs", CollectivePermute | CollectivePermuteStart) => {
                let at = self.c.pos;
                let pairs = self.int_list_list("source_target_pairs")?;
                let mut v = Vec::with_capacity(pairs.len());
                for p in pairs {
                    if p.len() != 2 {
                        return Err(self
                            .c
                            .error_at(at, "expects 'source_target_pairs=' to be a list of pairs"));
                    }
                    v.push((p[0], p[1]));
                }
                a.source_target_pairs = Some(v);
            }
            ("slice_sizes", CollectivePermute | CollectivePermuteStart) => {
                a.permute_slice_sizes = Some(self.int_list_list("slice_sizes")?)
            }
            ("calls", AsyncStart | AsyncUpdate | AsyncDone | Fusion) => {
                calls.calls = Some(self.comp_ref()?)
            }
            ("output_to_operand_aliasing", AsyncStart | Fusion) => {
                a.output_to_operand_aliasing = self.output_operand_aliasing()?
            }
            ("inferred_dimension", Reshape) => {
                a.inferred_dimension = Some(self.c.int("a dimension")?)
            }
            (
                "dimensions",
                Sort | Broadcast | Concatenate | Map | Scan | Reduce | Reverse | Transpose
                | GetDimensionSize | SetDimensionSize,
            ) => a.dimensions = Some(self.int_list("dimensions")?),
            ("is_stable", Sort) => a.is_stable = self.bool_value()?,
            ("has_dynamic_root", CollectiveBroadcast) => a.has_dynamic_root = self.bool_value()?,
            ("condition", While) => calls.condition = Some(self.comp_ref()?),
            ("body", While) => calls.body = Some(self.comp_ref()?),
            ("is_composite", Call) => a.is_composite = self.bool_value()?,
            _ => return self.parse_op_attr(a, operands, calls, key, op),
        }
        Ok(true)
    }

    /// `parse_attr` for the attributes of single opcodes (convolution, compare, rng, ...).
    fn parse_op_attr(
        &mut self,
        a: &mut Attrs,
        operands: &[InstrId],
        calls: &mut Calls,
        key: &str,
        op: Opcode,
    ) -> PResult<bool> {
        use Opcode::*;
        let dot_like = matches!(op, Dot | RaggedDot | ScaledDot);
        match (key, op) {
            ("window", ReduceWindow | Convolution | SelectAndScatter | CustomCall) => {
                a.window = Some(Box::new(self.parse_window()?))
            }
            ("dim_labels", Convolution | CustomCall) => {
                a.conv_dims = Some(Box::new(self.parse_dim_labels()?))
            }
            ("feature_group_count", Convolution | CustomCall) => {
                a.feature_group_count = self.c.int("a count")?
            }
            ("batch_group_count", Convolution | CustomCall) => {
                a.batch_group_count = self.c.int("a count")?
            }
            ("conv_kind", Convolution) => {
                a.conv_kind = Some(self.c.name("a convolution kind")?.to_string())
            }
            ("operand_precision", _) if dot_like || matches!(op, Convolution | CustomCall) => {
                let list = self.parse_precision_list()?;
                a.precision
                    .get_or_insert_with(Box::default)
                    .operand_precision = list;
            }
            ("algorithm", Dot | ScaledDot) => {
                let (at, w) = self.enum_word("a dot algorithm")?;
                let Some(v) = algorithm_value(w) else {
                    return self.bad_enum(at, "a dot algorithm such as dot_bf16_bf16_f32", w);
                };
                a.precision.get_or_insert_with(Box::default).algorithm = v;
            }
            ("algorithm", RngBitGenerator) => {
                let (at, w) = self.enum_word("an rng algorithm")?;
                a.rng_algorithm = Some(match w {
                    "rng_default" => RandomAlgorithm::Default,
                    "rng_three_fry" => RandomAlgorithm::ThreeFry,
                    "rng_philox" => RandomAlgorithm::Philox,
                    _ => return self.bad_enum(at, "rng_default, rng_three_fry or rng_philox", w),
                });
            }
            ("fft_type", Fft) => {
                let (at, w) = self.enum_word("an FFT type")?;
                a.fft_type = Some(match w {
                    "FFT" => FftType::Fft,
                    "IFFT" => FftType::Ifft,
                    "RFFT" => FftType::Rfft,
                    "IRFFT" => FftType::Irfft,
                    _ => return self.bad_enum(at, "FFT, IFFT, RFFT or IRFFT", w),
                });
            }
            ("left_side" | "lower" | "unit_diagonal" | "transpose_a", TriangularSolve) => {
                let t = a.triangular_solve.get_or_insert(TriangularSolveOptions {
                    left_side: false,
                    lower: false,
                    unit_diagonal: false,
                    transpose_a: TransposeKind::NoTranspose,
                });
                match key {
                    "left_side" => t.left_side = self.bool_value()?,
                    "lower" => t.lower = self.bool_value()?,
                    "unit_diagonal" => t.unit_diagonal = self.bool_value()?,
                    _ => {
                        let (at, w) = self.enum_word("a transpose kind")?;
                        t.transpose_a = match w {
                            "NO_TRANSPOSE" => TransposeKind::NoTranspose,
                            "TRANSPOSE" => TransposeKind::Transpose,
                            "ADJOINT" => TransposeKind::Adjoint,
                            _ => return self.bad_enum(at, "NO_TRANSPOSE, TRANSPOSE or ADJOINT", w),
                        };
                    }
                }
            }
            ("lower", Cholesky) => a.lower = self.bool_value()?,
            ("direction", Compare) => {
                let (at, w) = self.enum_word("a comparison direction")?;
                let Some(direction) = ComparisonDirection::from_name(w) else {
                    return self.bad_enum(at, &ComparisonDirection::expected(), w);
                };
                let ty = a.comparison.and_then(|c| c.ty);
                a.comparison = Some(Comparison { direction, ty });
            }
            ("type" | "order", Compare) => {
                let (at, w) = self.enum_word("a comparison type")?;
                let ty = match w {
                    "TOTAL" if key == "order" => ComparisonType::TotalOrder,
                    "PARTIAL" if key == "order" => ComparisonType::Float,
                    _ => match ComparisonType::from_name(w) {
                        Some(t) => t,
                        None => return self.bad_enum(at, &ComparisonType::expected(), w),
                    },
                };
                let direction = a
                    .comparison
                    .map_or(ComparisonDirection::Eq, |c| c.direction);
                a.comparison = Some(Comparison {
                    direction,
                    ty: Some(ty),
                });
            }
            ("num_carries", Scan) => {
                a.scan.get_or_insert_with(Box::default).num_carries = self.c.int("a count")?
            }
            ("is_reverse", Scan) => {
                a.scan.get_or_insert_with(Box::default).is_reverse = self.bool_value()?
            }
            ("is_associative", Scan) => {
                a.scan.get_or_insert_with(Box::default).is_associative = Some(self.bool_value()?)
            }
            ("select", SelectAndScatter) => calls.select = Some(self.comp_ref()?),
            ("scatter", SelectAndScatter) => calls.scatter = Some(self.comp_ref()?),
            ("slice", Slice) => a.slice = Some(self.parse_slice()?),
            ("padding", Pad) => a.padding = Some(self.parse_padding()?),
            ("kind", Fusion) => {
                let (at, w) = self.enum_word("a fusion kind")?;
                let Some(kind) = FusionKind::from_name(w) else {
                    return self.bad_enum(at, &FusionKind::expected(), w);
                };
                a.fusion_kind = Some(kind);
            }
            ("outfeed_shape", Outfeed) => a.outfeed_shape = Some(Box::new(self.parse_shape()?)),
            ("distribution", Rng) => {
                let (at, w) = self.enum_word("a distribution")?;
                a.distribution = Some(match w {
                    "rng_uniform" => RandomDistribution::Uniform,
                    "rng_normal" => RandomDistribution::Normal,
                    _ => return self.bad_enum(at, "rng_uniform or rng_normal", w),
                });
            }
            ("true_computation", Conditional) => calls.true_computation = Some(self.comp_ref()?),
            ("false_computation", Conditional) => calls.false_computation = Some(self.comp_ref()?),
            ("branch_computations", Conditional) => calls.branches = Some(self.comp_list()?),
            _ => return self.parse_call_and_dims_attr(a, operands, calls, key, op),
        }
        Ok(true)
    }

    /// `parse_attr` for custom-call's options and the dot, gather and scatter dimension numbers.
    fn parse_call_and_dims_attr(
        &mut self,
        a: &mut Attrs,
        operands: &[InstrId],
        calls: &mut Calls,
        key: &str,
        op: Opcode,
    ) -> PResult<bool> {
        use Opcode::*;
        match (key, op) {
            ("custom_call_target", CustomCall) => {
                a.custom_call.get_or_insert_with(Box::default).target =
                    self.c.string("a custom-call target")?
            }
            ("operand_layout_constraints", CustomCall) => {
                self.c.expect(b'{', "to start operand_layout_constraints")?;
                let mut v = Vec::new();
                if !self.c.eat(b'}')? {
                    loop {
                        v.push(self.parse_shape()?);
                        if self.c.eat(b'}')? {
                            break;
                        }
                        self.c
                            .expect(b',', "or '}' in operand_layout_constraints")?;
                    }
                }
                if v.len() != operands.len() {
                    return Err(self.c.error_at(
                        self.c.pos,
                        format!(
                            "expected {} operand layout constraints, {} given",
                            operands.len(),
                            v.len()
                        ),
                    ));
                }
                a.custom_call
                    .get_or_insert_with(Box::default)
                    .operand_layout_constraints = Some(v);
            }
            ("custom_call_has_side_effect", CustomCall) => {
                a.custom_call
                    .get_or_insert_with(Box::default)
                    .has_side_effect = self.bool_value()?
            }
            ("to_apply", CustomCall) => {
                calls.to_apply = Some(self.comp_ref()?);
            }
            ("called_computations", CustomCall) => {
                calls.called_computations = Some(self.comp_list()?)
            }
            ("output_to_operand_aliasing", CustomCall) => {
                a.custom_call
                    .get_or_insert_with(Box::default)
                    .output_to_operand_aliasing = self.output_operand_aliasing()?
            }
            ("padding_type", CustomCall) => {
                let (at, w) = self.enum_word("a padding type")?;
                a.custom_call.get_or_insert_with(Box::default).padding_type = match w {
                    "PADDING_INVALID" => 0,
                    "PADDING_VALID" => 1,
                    "PADDING_SAME" => 2,
                    _ => return self.bad_enum(at, "PADDING_VALID or PADDING_SAME", w),
                };
            }
            ("literal", CustomCall) => {
                let shape = self.parse_shape()?;
                let lit = self.parse_literal(&shape)?;
                a.literal = Some(Box::new(lit));
            }
            ("schedule", CustomCall) => {
                let (at, w) = self.enum_word("a custom-call schedule")?;
                let Some(schedule) = CustomCallSchedule::from_name(w) else {
                    return self.bad_enum(at, &CustomCallSchedule::expected(), w);
                };
                a.custom_call.get_or_insert_with(Box::default).schedule = schedule;
            }
            ("api_version", CustomCall) => {
                let (at, w) = self.enum_word("a custom-call API version")?;
                a.custom_call.get_or_insert_with(Box::default).api_version = match w {
                    "API_VERSION_ORIGINAL" => CustomCallApiVersion::Original,
                    "API_VERSION_STATUS_RETURNING" => CustomCallApiVersion::StatusReturning,
                    "API_VERSION_STATUS_RETURNING_UNIFIED" => {
                        CustomCallApiVersion::StatusReturningUnified
                    }
                    "API_VERSION_TYPED_FFI" => CustomCallApiVersion::TypedFfi,
                    _ => {
                        return Err(self
                            .c
                            .error_at(at, format!("invalid custom-call API version '{w}'")))
                    }
                };
            }
            ("domain", Domain) => a.domain = Some(Box::new(self.parse_domain()?)),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks required attributes and puts called computations in XLA's order.
    pub(super) fn finish_attrs(
        &mut self,
        instr: &mut Instruction,
        operands: &[InstrId],
        calls: Calls,
        seen: &[&str],
        at: usize,
    ) -> PResult<()> {
        use Opcode::*;
        let op = instr.opcode;
        let require = |names: &[&str]| -> PResult<()> {
            for n in names {
                if !seen.contains(n) {
                    return Err(self.c.error_at(
                        at,
                        format!("attribute '{n}' is expected for opcode {}", op.name()),
                    ));
                }
            }
            Ok(())
        };
        match op {
            Iota => require(&["iota_dimension"])?,
            TopK => require(&["k"])?,
            AllGather | AllGatherStart => require(&["dimensions"])?,
            AllReduce | AllReduceStart => require(&["to_apply"])?,
            ReduceScatter => require(&["to_apply", "dimensions"])?,
            CollectivePermute | CollectivePermuteStart => require(&["source_target_pairs"])?,
            AsyncStart => require(&["calls"])?,
            Sort => require(&["dimensions", "to_apply"])?,
            While => require(&["condition", "body"])?,
            Call | Map | Reduce | ReduceWindow => require(&["to_apply"])?,
            Convolution => require(&["dim_labels"])?,
            Fft => require(&["fft_type"])?,
            Compare => require(&["direction"])?,
            Concatenate | Reverse | Transpose | GetDimensionSize | SetDimensionSize => {
                require(&["dimensions"])?
            }
            Scan => require(&["to_apply", "dimensions", "num_carries"])?,
            SelectAndScatter => require(&["select", "scatter"])?,
            Slice => require(&["slice"])?,
            Pad => require(&["padding"])?,
            Fusion => require(&["calls", "kind"])?,
            Rng => require(&["distribution"])?,
            RngBitGenerator => require(&["algorithm"])?,
            CustomCall => require(&["custom_call_target"])?,
            Gather => require(&attr_table::required_dims(attr_table::GATHER_DIMS))?,
            Scatter => {
                require(&attr_table::required_dims(attr_table::SCATTER_DIMS))?;
                require(&["to_apply"])?
            }
            Domain => require(&["domain"])?,
            Broadcast => {
                let scalar = operands
                    .first()
                    .is_some_and(|&o| self.m.instr(o).shape.rank() == 0);
                if !scalar {
                    require(&["dimensions"])?;
                }
            }
            _ => {}
        }
        for row in attr_table::plain_rows() {
            if row.required && (row.on)(op) {
                require(&[row.key])?;
            }
        }
        if let Some(dims) = &instr.attrs.dimensions {
            if matches!(
                op,
                Sort | Concatenate
                    | AllGather
                    | AllGatherStart
                    | ReduceScatter
                    | Scan
                    | GetDimensionSize
                    | SetDimensionSize
            ) && dims.len() != 1
            {
                return Err(self.c.error_at(
                    at,
                    format!("{} expects exactly one dimension in dimensions=", op.name()),
                ));
            }
        }
        let called: SmallVec<[CompId; 1]> = match op {
            While => [calls.condition, calls.body]
                .into_iter()
                .flatten()
                .collect(),
            SelectAndScatter => [calls.select, calls.scatter]
                .into_iter()
                .flatten()
                .collect(),
            Conditional => {
                let pred = operands
                    .first()
                    .map(|&o| self.m.instr(o).shape.element_type());
                if let (Some(t), Some(f)) = (calls.true_computation, calls.false_computation) {
                    if calls.branches.is_some() {
                        return Err(self.c.error_at(
                            at,
                            "conditional takes either true/false_computation or branch_computations",
                        ));
                    }
                    if pred != Some(ElementType::Pred) {
                        return Err(self.c.error_at(
                            at,
                            "true_computation/false_computation need a pred branch selector",
                        ));
                    }
                    instr.predicated_conditional = true;
                    [t, f].into_iter().collect()
                } else if let Some(b) = calls.branches {
                    if pred == Some(ElementType::Pred) {
                        return Err(self.c.error_at(
                            at,
                            "a conditional with a pred selector takes true_computation and false_computation",
                        ));
                    }
                    if b.is_empty() || b.len() + 1 != operands.len() {
                        return Err(self.c.error_at(
                            at,
                            format!(
                                "conditional has {} branches but {} branch operands",
                                b.len(),
                                operands.len().saturating_sub(1)
                            ),
                        ));
                    }
                    b.into_iter().collect()
                } else {
                    return Err(self.c.error_at(
                        at,
                        "conditional needs branch_computations= or true_computation=/false_computation=",
                    ));
                }
            }
            Fusion | AsyncStart | AsyncUpdate | AsyncDone => calls.calls.into_iter().collect(),
            CustomCall => {
                if calls.to_apply.is_some() && calls.called_computations.is_some() {
                    return Err(self.c.error_at(
                        at,
                        "a custom-call can't have both to_apply and called_computations",
                    ));
                }
                if let Some(t) = calls.to_apply {
                    instr.attrs.custom_call_uses_to_apply = true;
                    [t].into_iter().collect()
                } else {
                    calls
                        .called_computations
                        .unwrap_or_default()
                        .into_iter()
                        .collect()
                }
            }
            _ => calls.to_apply.into_iter().collect(),
        };
        instr.called = called;
        // XLA's defaults for attributes that it always prints.
        let a = &mut instr.attrs;
        let takes_groups = op.takes_replica_groups();
        if takes_groups && a.replica_groups.is_none() {
            a.replica_groups = Some(Box::new(ReplicaGroups::Explicit(Vec::new())));
        }
        if op == Broadcast && a.dimensions.is_none() {
            a.dimensions = Some(Vec::new());
        }
        if op == Outfeed && a.outfeed_shape.is_none() {
            if let Some(&o) = operands.first() {
                a.outfeed_shape = Some(Box::new(self.m.instr(o).shape.clone()));
            }
        }
        if let Some(p) = a.precision.as_mut() {
            if p.operand_precision.iter().all(|&x| x == Precision::Default) {
                p.operand_precision.clear();
            }
            if p.operand_precision.is_empty() && p.algorithm == 0 {
                a.precision = None;
            }
        }
        // recv-done's shape comes from its recv, as in XLA (a declared shape is not kept).
        if op == RecvDone {
            if let Some(shape) = self.m.recv_done_shape(operands) {
                instr.shape = shape;
            }
        }
        Ok(())
    }
}

/// `xla.PrecisionConfig.Algorithm` names as the text spells them (`ALG_` dropped, lower case).
fn algorithm_value(w: &str) -> Option<i32> {
    let w = w.strip_prefix("alg_").unwrap_or(w);
    DOT_ALGORITHMS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(w))
        .map(|&(_, v)| v)
}
