//! Instructions and the typed ids that name instructions and computations.

use std::fmt;
use std::ops::{Deref, DerefMut};

use smallvec::SmallVec;

use crate::attrs::Attrs;
use crate::metadata::{FrontendAttributes, OpMetadata};
use crate::opcode::Opcode;
use crate::rare::{Empty, Rare};
use crate::shape::Shape;
use crate::sharding::Sharding;

macro_rules! entity_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            pub fn new(index: usize) -> $name {
                $name(u32::try_from(index).expect("more than u32::MAX entities"))
            }

            /// The dense index, for side tables.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity_id!(
    /// An instruction of a [`crate::Module`]: an index into the module's instruction arena.
    /// Ids are module-wide, so a side table over all instructions is a `Vec` of
    /// [`crate::Module::instr_capacity`] entries.
    InstrId,
    "instr"
);
entity_id!(
    /// A computation of a [`crate::Module`].
    CompId,
    "comp"
);

pub type Operands = SmallVec<[InstrId; 2]>;

/// One HLO instruction.
///
/// `operands`, `users`, `control_predecessors` and `control_successors` are kept consistent by
/// the mutation API of [`crate::Module`]; change them only through it.
///
/// The fields most instructions leave unset (sharding, metadata, frontend attributes, backend
/// config, control edges) live in [`RareInstrFields`], allocated on first write; `Instruction`
/// dereferences to it, so they read and write as fields (`instr.sharding = Some(s)`).
#[derive(Clone, Debug)]
pub struct Instruction {
    /// Unique in its module: renamed only through [`crate::Module::rename_instruction`].
    pub(crate) name: String,
    pub(crate) opcode: Opcode,
    /// True when the conditional was written with `true_computation=`/`false_computation=`.
    pub predicated_conditional: bool,
    /// The computation this instruction belongs to (set by [`crate::Module::add_instruction`];
    /// read it with [`Instruction::parent`]).
    pub(crate) parent: CompId,
    pub shape: Shape,
    pub(crate) operands: Operands,
    /// Called computations in XLA's order: `to_apply` for reduce/map/sort/all-reduce/scatter/
    /// call/reduce-window; `[condition, body]` for while; the branches for conditional
    /// (`[true, false]` for the predicated form); `calls` for fusion/async/custom-call;
    /// `[select, scatter]` for select-and-scatter.
    pub called: SmallVec<[CompId; 1]>,
    /// Distinct users, in the order they started using this instruction (inline up to two:
    /// most instructions have one or two users, and a heap vector each was a visible cost).
    pub(crate) users: SmallVec<[InstrId; 2]>,
    pub attrs: Attrs,
    /// The rarely set fields; reached through `Deref` (`instr.sharding`).
    pub rare: Rare<RareInstrFields>,
}

/// The fields of an [`Instruction`] that most instructions leave unset.
#[derive(Clone, Debug, PartialEq)]
pub struct RareInstrFields {
    pub sharding: Option<Sharding>,
    pub metadata: Option<OpMetadata>,
    pub frontend_attributes: FrontendAttributes,
    /// Free-form backend configuration (usually JSON), as written.
    pub backend_config: Option<String>,
    pub(crate) control_predecessors: Vec<InstrId>,
    pub(crate) control_successors: Vec<InstrId>,
}

static EMPTY_RARE_FIELDS: RareInstrFields = RareInstrFields {
    sharding: None,
    metadata: None,
    frontend_attributes: FrontendAttributes::new(),
    backend_config: None,
    control_predecessors: Vec::new(),
    control_successors: Vec::new(),
};

impl Empty for RareInstrFields {
    fn empty() -> &'static RareInstrFields {
        &EMPTY_RARE_FIELDS
    }
}

impl Deref for Instruction {
    type Target = RareInstrFields;

    fn deref(&self) -> &RareInstrFields {
        &self.rare
    }
}

impl DerefMut for Instruction {
    fn deref_mut(&mut self) -> &mut RareInstrFields {
        &mut self.rare
    }
}

impl Instruction {
    #[inline]
    pub fn opcode(&self) -> Opcode {
        self.opcode
    }

    /// A new instruction with no operands, users or attributes; add it with
    /// [`crate::Module::add_instruction`].
    pub fn new(name: impl Into<String>, opcode: Opcode, shape: Shape) -> Instruction {
        Instruction {
            name: name.into(),
            opcode,
            predicated_conditional: false,
            parent: CompId::new(0),
            shape,
            operands: Operands::new(),
            called: SmallVec::new(),
            users: SmallVec::new(),
            attrs: Attrs::default(),
            rare: Rare::new(),
        }
    }

    pub fn with_operands(mut self, operands: &[InstrId]) -> Instruction {
        self.operands = operands.iter().copied().collect();
        self
    }

    /// The same instruction under another name, before it is added to a module (which refuses
    /// a name already in use); an added instruction is renamed through
    /// [`crate::Module::rename_instruction`].
    pub fn with_name(mut self, name: impl Into<String>) -> Instruction {
        self.name = name.into();
        self
    }

    pub fn with_called(mut self, called: &[CompId]) -> Instruction {
        self.called = called.iter().copied().collect();
        self
    }

    /// The instruction's name, unique in its module (without the `%`).
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The computation this instruction belongs to.
    #[inline]
    pub fn parent(&self) -> CompId {
        self.parent
    }

    #[inline]
    pub fn operands(&self) -> &[InstrId] {
        &self.operands
    }

    #[inline]
    pub fn users(&self) -> &[InstrId] {
        &self.users
    }

    #[inline]
    pub fn control_predecessors(&self) -> &[InstrId] {
        &self.control_predecessors
    }

    pub fn control_successors(&self) -> &[InstrId] {
        &self.control_successors
    }

    #[inline]
    pub fn operand(&self, i: usize) -> InstrId {
        self.operands[i]
    }

    /// `to_apply` of reduce, map, sort, all-reduce, scatter, call, ... (the first called
    /// computation).
    pub fn to_apply(&self) -> Option<CompId> {
        self.called.first().copied()
    }

    pub fn while_condition(&self) -> Option<CompId> {
        (self.opcode == Opcode::While)
            .then(|| self.called.first().copied())
            .flatten()
    }

    pub fn while_body(&self) -> Option<CompId> {
        (self.opcode == Opcode::While)
            .then(|| self.called.get(1).copied())
            .flatten()
    }

    /// True for instructions whose effects are visible beyond their result.
    pub fn has_side_effect(&self) -> bool {
        use Opcode::*;
        match self.opcode {
            Send
            | SendDone
            | Recv
            | RecvDone
            | Rng
            | RngGetAndUpdateState
            | Infeed
            | Outfeed
            | AllReduceStart
            | AllReduceDone
            | AllGatherStart
            | AllGatherDone
            | CollectivePermuteStart
            | CollectivePermuteDone => true,
            CustomCall => self
                .attrs
                .custom_call
                .as_ref()
                .is_some_and(|c| c.has_side_effect),
            AllReduce | AllGather | AllToAll | ReduceScatter | CollectivePermute
            | CollectiveBroadcast | RaggedAllToAll => self.attrs.constrain_layout,
            _ => false,
        }
    }
}
