//! The op table's sort section (see `super`).

#[allow(unused_imports)]
use super::Accept::*;
#[allow(unused_imports)]
use super::Out::*;
#[allow(unused_imports)]
use super::{other, pointwise, Row};

pub static ROWS: &[Row] = &[];
