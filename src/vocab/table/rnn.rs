//! The op table's recurrent layers: `torch.lstm` and `torch.gru` over a
//! whole sequence and their single-step cells, with the TensorLists of
//! PyTorch's signatures flattened into the inputs (the ABI's convention):
//! `[input, h0, c0, *params]` for lstm, `[input, hx, *params]` for gru,
//! params in `nn.LSTM`/`nn.GRU`'s `_flat_weights` order, so a `state_dict`
//! moves between the two unchanged. The flags have `nn.LSTM`'s defaults
//! here (ATen's operator has none). `proj_size` is not supported. Cases
//! with weights that do not fit the sizes are tested in
//! `python/tests/test_rnn.py`, not here: PyTorch's kernels read such
//! weights out of bounds (core refuses them, `crate::vocab::rnn`).

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other(
        "lstm",
        &["lstm(Tensor input, Tensor h0, Tensor c0, Tensor[] params, bool has_biases=True, int num_layers=1, float dropout=0.0, bool train=False, bool bidirectional=False, bool batch_first=False) -> (Tensor, Tensor, Tensor) \
           => lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)"],
        Float,
        Same,
        true,
        &[
            // input [T=4, B=2, in=3], hidden 5: w_ih [20, 3], w_hh [20, 5], biases [20].
            r#"{"inputs": [[4, 2, 3], [1, 2, 5], [1, 2, 5], [[20, 3], [20, 5], [20], [20]]]}"#,
            r#"{"inputs": [[2, 4, 3], [1, 2, 5], [1, 2, 5], [[20, 3], [20, 5], [20], [20]]], "kwargs": {"batch_first": true}}"#,
            r#"{"inputs": [[4, 2, 3], [2, 2, 5], [2, 2, 5], [[20, 3], [20, 5], [20, 5], [20, 5]]], "kwargs": {"num_layers": 2, "has_biases": false}}"#,
            r#"{"inputs": [[3, 2, 3], [4, 2, 5], [4, 2, 5], [[20, 3], [20, 5], [20], [20], [20, 3], [20, 5], [20], [20], [20, 10], [20, 5], [20], [20], [20, 10], [20, 5], [20], [20]]], "kwargs": {"num_layers": 2, "bidirectional": true}}"#,
        ],
    )
    .in_torch(),
    other(
        "gru",
        &["gru(Tensor input, Tensor hx, Tensor[] params, bool has_biases=True, int num_layers=1, float dropout=0.0, bool train=False, bool bidirectional=False, bool batch_first=False) -> (Tensor, Tensor) \
           => gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[4, 2, 3], [1, 2, 5], [[15, 3], [15, 5], [15], [15]]]}"#,
            r#"{"inputs": [[2, 4, 3], [1, 2, 5], [[15, 3], [15, 5], [15], [15]]], "kwargs": {"batch_first": true}}"#,
            r#"{"inputs": [[3, 2, 3], [4, 2, 5], [[15, 3], [15, 5], [15], [15], [15, 3], [15, 5], [15], [15], [15, 10], [15, 5], [15], [15], [15, 10], [15, 5], [15], [15]]], "kwargs": {"num_layers": 2, "bidirectional": true}}"#,
            r#"{"inputs": [[4, 2, 3], [1, 2, 5], [[15, 3], [15, 5]]], "kwargs": {"has_biases": false}}"#,
            r#"{"inputs": [[4, 2, 3], [2, 2, 5], [[15, 3], [15, 5], [15], [15]]]}"#,
        ],
    )
    .in_torch(),
    other(
        "lstm_cell",
        &["lstm_cell(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor? b_ih=None, Tensor? b_hh=None) -> (Tensor, Tensor) \
           => lstm_cell(Tensor input, Tensor[] hx, Tensor w_ih, Tensor w_hh, Tensor? b_ih=None, Tensor? b_hh=None) -> (Tensor, Tensor)"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 3], [2, 5], [2, 5], [20, 3], [20, 5], [20], [20]]}"#,
            r#"{"inputs": [[3], [5], [5], [20, 3], [20, 5]]}"#,
        ],
    )
    .in_torch(),
    other(
        "gru_cell",
        &["gru_cell(Tensor input, Tensor hx, Tensor w_ih, Tensor w_hh, Tensor? b_ih=None, Tensor? b_hh=None) -> Tensor"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 3], [2, 5], [15, 3], [15, 5], [15], [15]]}"#,
            r#"{"inputs": [[3], [5], [15, 3], [15, 5]]}"#,
            r#"{"inputs": [[2, 3], [3, 5], [15, 3], [15, 5], [15], [15]]}"#,
        ],
    ),
];
