//! Hand-built modules for unit tests of analyses and passes (no text parser involved), so a
//! test states exactly the graph it checks.

use crate::instruction::{CompId, InstrId, Instruction};
use crate::module::Module;
use crate::opcode::Opcode;
use crate::shape::Shape;
use crate::types::ElementType;

pub fn f32v(n: i64) -> Shape {
    Shape::array(ElementType::F32, &[n])
}

pub fn f32s() -> Shape {
    Shape::scalar(ElementType::F32)
}

pub fn tuple(e: &[Shape]) -> Shape {
    Shape::tuple(e.to_vec())
}

pub struct Builder {
    pub m: Module,
}

impl Builder {
    pub fn new(name: &str) -> Builder {
        Builder {
            m: Module::new(name),
        }
    }

    pub fn comp(&mut self, name: &str) -> CompId {
        self.m.add_computation(name).unwrap()
    }

    pub fn param(&mut self, c: CompId, n: i64, shape: Shape) -> InstrId {
        let name = format!("{}.p{n}", self.m.comp(c).name);
        let mut i = Instruction::new(name, Opcode::Parameter, shape);
        i.attrs.parameter_number = n;
        self.m.add_instruction(c, i).unwrap()
    }

    pub fn op(
        &mut self,
        c: CompId,
        name: &str,
        opcode: Opcode,
        shape: Shape,
        operands: &[InstrId],
    ) -> InstrId {
        self.m
            .add_instruction(
                c,
                Instruction::new(name, opcode, shape).with_operands(operands),
            )
            .unwrap()
    }

    pub fn gte(&mut self, c: CompId, name: &str, t: InstrId, index: i64) -> InstrId {
        let shape = self.m.instr(t).shape.tuple_elements()[index as usize].clone();
        let mut i = Instruction::new(name, Opcode::GetTupleElement, shape).with_operands(&[t]);
        i.attrs.tuple_index = index;
        self.m.add_instruction(c, i).unwrap()
    }

    pub fn tuple(&mut self, c: CompId, name: &str, ops: &[InstrId]) -> InstrId {
        let shape = Shape::tuple(ops.iter().map(|&o| self.m.instr(o).shape.clone()).collect());
        self.op(c, name, Opcode::Tuple, shape, ops)
    }

    /// `add(f32[], f32[]) -> f32[]`.
    pub fn scalar_add(&mut self, name: &str) -> CompId {
        let c = self.comp(name);
        let a = self.param(c, 0, f32s());
        let b = self.param(c, 1, f32s());
        let r = self.op(c, &format!("{name}.sum"), Opcode::Add, f32s(), &[a, b]);
        self.m.set_root(c, r);
        c
    }
}
