//! The CPU KV cache: per layer, keys and values of every position so far, as `f32`s or as
//! half floats.

use super::cache_float::CacheFloat;
use super::grouped_attention::{self, KeyBlocks};
use super::ops::AttentionInput;
use super::ssm::ScanCache;
use half::f16;

/// Keys and values of every layer, grown as tokens arrive (never preallocated to the full
/// context, which would be hundreds of MB in wasm): an attending layer's keys in blocks of
/// positions ([`KeyBlocks`], as its attention reads them) and its values in rows,
/// `[pos, kv_dim]`, both as `f32` or both as half floats ([`KvCache::for_model`]'s
/// `half_floats`). A convolving layer (LFM2's) keeps its gated inputs `b * x'` in `f32` rows,
/// `[pos, dim]`, and no values: like keys, one row per position, so a cut back to a position
/// forgets them too. A scanning layer (Granite 4.0 H's) keeps its inputs in rows and its
/// fixed-size state ([`ScanCache`]).
pub struct KvCache {
    layers: Vec<LayerCache>,
    len: usize,
    capacity: usize,
}

/// One layer's cache.
enum LayerCache {
    /// An attending layer's keys and values as `f32`.
    F32(LayerKv<f32>),
    /// An attending layer's keys and values as half floats.
    F16(LayerKv<f16>),
    /// A convolving layer's gated inputs, `[pos, width]`.
    Rows { rows: Vec<f32>, width: usize },
    /// A scanning layer's inputs and state.
    Scan(ScanCache),
}

/// An attending layer's keys, in blocks, and values, `[positions, width]`, stored as `T`.
pub struct LayerKv<T> {
    keys: KeyBlocks<T>,
    values: Vec<T>,
    /// Values per position (`kv_dim`).
    width: usize,
}

impl<T: CacheFloat> LayerKv<T> {
    fn new(head_dim: usize, n_kv_heads: usize) -> Self {
        LayerKv { keys: KeyBlocks::new(head_dim, n_kv_heads), values: Vec::new(), width: head_dim * n_kv_heads }
    }

    fn append(&mut self, k: &[f32], v: &[f32]) {
        self.keys.append(k);
        T::extend(&mut self.values, v);
    }

    fn append_zeros(&mut self, n: usize) {
        self.keys.append_zeros(n);
        self.values.resize(self.values.len() + n * self.width, T::default());
    }

    fn truncate(&mut self, len: usize) {
        self.keys.truncate(len);
        self.values.truncate(len * self.width);
    }

    fn bytes(&self) -> usize {
        self.keys.bytes() + self.values.len() * T::BYTES
    }
}

/// An attending layer's cache as its attention reads it.
#[derive(Clone, Copy)]
pub enum CachedKv<'a> {
    /// Keys and values as `f32`.
    F32(&'a LayerKv<f32>),
    /// Keys and values as half floats.
    F16(&'a LayerKv<f16>),
}

impl CachedKv<'_> {
    /// [`grouped_attention::attend_heads`] over this layer's keys and values (the heads'
    /// `keys` and `values` are not read).
    pub fn attend_heads(self, kv_head: usize, heads: &[AttentionInput], scores: &mut [f32], out: &mut [f32]) {
        match self {
            CachedKv::F32(l) => grouped_attention::attend_heads(&l.keys, &l.values, kv_head, heads, scores, out),
            CachedKv::F16(l) => grouped_attention::attend_heads(&l.keys, &l.values, kv_head, heads, scores, out),
        }
    }

    /// [`grouped_attention::attention_weights`] over this layer's keys.
    pub fn attention_weights(self, kv_head: usize, heads: &[AttentionInput], weights: &mut [f32]) {
        match self {
            CachedKv::F32(l) => grouped_attention::attention_weights(&l.keys, kv_head, heads, weights),
            CachedKv::F16(l) => grouped_attention::attention_weights(&l.keys, kv_head, heads, weights),
        }
    }
}

impl KvCache {
    /// An empty cache for the layers of `cfg`: `kv_dim` keys and values where a layer
    /// attends (half floats where `half_floats`, else `f32`), `dim` gated inputs where it
    /// convolves, the scan's inputs and state where it scans.
    pub fn for_model(cfg: &crate::model::Config, capacity: usize, half_floats: bool) -> Self {
        let layers = (0..cfg.n_layers)
            .map(|l| match (cfg.is_conv_layer(l), cfg.ssm.as_ref().filter(|_| cfg.is_ssm_layer(l)), half_floats) {
                (true, _, _) => LayerCache::Rows { rows: Vec::new(), width: cfg.dim },
                (false, Some(ssm), _) => LayerCache::Scan(ScanCache::new(ssm)),
                (false, None, false) => LayerCache::F32(LayerKv::new(cfg.head_dim, cfg.n_kv_heads)),
                (false, None, true) => LayerCache::F16(LayerKv::new(cfg.head_dim, cfg.n_kv_heads)),
            })
            .collect();
        KvCache { layers, len: 0, capacity }
    }

    /// Appends `n` positions to one layer. Shapes: `k`, `v`: `[n, width]`, the layer's (`v`
    /// empty for a convolving or scanning layer). Call for every layer, then
    /// [`KvCache::commit`].
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        match &mut self.layers[layer] {
            LayerCache::F32(kv) => kv.append(k, v),
            LayerCache::F16(kv) => kv.append(k, v),
            LayerCache::Rows { rows, .. } => rows.extend_from_slice(k),
            LayerCache::Scan(scan) => scan.append(k),
        }
    }

    /// Appends `n` positions of zeros to one layer (a layer a pass skips).
    pub fn append_zeros(&mut self, layer: usize, n: usize) {
        match &mut self.layers[layer] {
            LayerCache::F32(kv) => kv.append_zeros(n),
            LayerCache::F16(kv) => kv.append_zeros(n),
            LayerCache::Rows { rows, width } => rows.resize(rows.len() + n * *width, 0.0),
            LayerCache::Scan(scan) => scan.append_zeros(n),
        }
    }

    /// Marks `n` appended positions as complete in every layer.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// An attending layer's keys and values, including uncommitted positions; `None` for a
    /// convolving layer.
    pub fn attention(&self, layer: usize) -> Option<CachedKv<'_>> {
        match &self.layers[layer] {
            LayerCache::F32(kv) => Some(CachedKv::F32(kv)),
            LayerCache::F16(kv) => Some(CachedKv::F16(kv)),
            LayerCache::Rows { .. } | LayerCache::Scan(_) => None,
        }
    }

    /// A scanning layer's cache, to scan; `None` for any other layer.
    pub fn scan_mut(&mut self, layer: usize) -> Option<&mut ScanCache> {
        match &mut self.layers[layer] {
            LayerCache::Scan(scan) => Some(scan),
            _ => None,
        }
    }

    /// A scanning layer's cache; `None` for any other layer.
    pub fn scan(&self, layer: usize) -> Option<&ScanCache> {
        match &self.layers[layer] {
            LayerCache::Scan(scan) => Some(scan),
            _ => None,
        }
    }

    /// A convolving layer's rows, `[positions, dim]`, including uncommitted ones; `None` for
    /// an attending layer.
    pub fn rows(&self, layer: usize) -> Option<&[f32]> {
        match &self.layers[layer] {
            LayerCache::Rows { rows, .. } => Some(rows),
            LayerCache::F32(_) | LayerCache::F16(_) | LayerCache::Scan(_) => None,
        }
    }

    /// Forgets every position from `len` on.
    /// Rows appended but not committed are dropped too.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for layer in &mut self.layers {
            match layer {
                LayerCache::F32(kv) => kv.truncate(len),
                LayerCache::F16(kv) => kv.truncate(len),
                LayerCache::Rows { rows, width } => rows.truncate(len * *width),
                LayerCache::Scan(scan) => scan.truncate(len),
            }
        }
        self.len = len;
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions it may hold (the context window).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes each attending layer's key or value takes: 2 in half floats, else 4.
    pub fn bytes_per_value(&self) -> usize {
        match self.layers.iter().find(|l| matches!(l, LayerCache::F32(_) | LayerCache::F16(_))) {
            Some(LayerCache::F16(_)) => f16::BYTES,
            _ => f32::BYTES,
        }
    }

    /// Bytes of the positions held now.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|layer| match layer {
                LayerCache::F32(kv) => kv.bytes(),
                LayerCache::F16(kv) => kv.bytes(),
                LayerCache::Rows { rows, .. } => rows.len() * 4,
                LayerCache::Scan(scan) => scan.bytes(),
            })
            .sum()
    }
}
