//! The kinds of the typed entry points' ops (`enkai_tensor_add`, `_relu`,
//! `_sum`, ...), which both backends implement directly.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unary {
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
    Detach,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
}

impl Unary {
    pub fn name(self) -> &'static str {
        match self {
            Unary::Relu => "relu",
            Unary::Sigmoid => "sigmoid",
            Unary::Tanh => "tanh",
            Unary::Gelu => "gelu",
            Unary::Detach => "detach",
        }
    }
}

impl Binary {
    pub fn name(self) -> (&'static str, &'static str) {
        match self {
            Binary::Add => ("add", "+"),
            Binary::Sub => ("sub", "-"),
            Binary::Mul => ("mul", "*"),
            Binary::Div => ("div", "/"),
        }
    }
}
