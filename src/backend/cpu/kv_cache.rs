//! The CPU KV cache: per layer, keys and values of every position so far.

use super::grouped_attention::KeyBlocks;

/// Keys and values of every layer, grown as tokens arrive (never preallocated to the full
/// context, which would be hundreds of MB in wasm): an attending layer's keys in blocks of
/// positions ([`KeyBlocks`], as its attention reads them) and its values in rows,
/// `[pos, kv_dim]`. A convolving layer (LFM2's) keeps its gated inputs `b * x'` in rows,
/// `[pos, dim]`, and no values: like keys, one row per position, so a cut back to a
/// position forgets them too.
pub struct KvCache {
    keys: Vec<LayerKeys>,
    values: Vec<Vec<f32>>,
    /// Floats per position of each layer's values.
    value_widths: Vec<usize>,
    len: usize,
    capacity: usize,
}

/// One layer's keys.
enum LayerKeys {
    /// An attending layer's, in blocks of positions.
    Blocks(KeyBlocks),
    /// A convolving layer's gated inputs, `[pos, width]`.
    Rows { rows: Vec<f32>, width: usize },
}

impl KvCache {
    /// An empty cache for the layers of `cfg`: `kv_dim` keys and values where a layer
    /// attends, `dim` gated inputs where it convolves.
    pub fn for_model(cfg: &crate::model::Config, capacity: usize) -> Self {
        let (keys, value_widths) = (0..cfg.n_layers)
            .map(|l| match cfg.is_conv_layer(l) {
                true => (LayerKeys::Rows { rows: Vec::new(), width: cfg.dim }, 0),
                false => (LayerKeys::Blocks(KeyBlocks::new(cfg.head_dim, cfg.n_kv_heads)), cfg.kv_dim()),
            })
            .unzip();
        KvCache { keys, values: vec![Vec::new(); cfg.n_layers], value_widths, len: 0, capacity }
    }

    /// Appends `n` positions to one layer. Shapes: `k`, `v`: `[n, width]`, the layer's.
    /// Call for every layer, then [`KvCache::commit`].
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        match &mut self.keys[layer] {
            LayerKeys::Blocks(blocks) => blocks.append(k),
            LayerKeys::Rows { rows, .. } => rows.extend_from_slice(k),
        }
        self.values[layer].extend_from_slice(v);
    }

    /// Appends `n` positions of zeros to one layer (a layer a pass skips).
    pub fn append_zeros(&mut self, layer: usize, n: usize) {
        match &mut self.keys[layer] {
            LayerKeys::Blocks(blocks) => blocks.append_zeros(n),
            LayerKeys::Rows { rows, width } => rows.resize(rows.len() + n * *width, 0.0),
        }
        let values = &mut self.values[layer];
        values.resize(values.len() + n * self.value_widths[layer], 0.0);
    }

    /// Marks `n` appended positions as complete in every layer.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// An attending layer's keys, in blocks, and values, `[positions, kv_dim]`, including
    /// uncommitted positions; `None` for a convolving layer.
    pub fn attention(&self, layer: usize) -> Option<(&KeyBlocks, &[f32])> {
        match &self.keys[layer] {
            LayerKeys::Blocks(blocks) => Some((blocks, &self.values[layer])),
            LayerKeys::Rows { .. } => None,
        }
    }

    /// A convolving layer's rows, `[positions, dim]`, including uncommitted ones; `None` for
    /// an attending layer.
    pub fn rows(&self, layer: usize) -> Option<&[f32]> {
        match &self.keys[layer] {
            LayerKeys::Rows { rows, .. } => Some(rows),
            LayerKeys::Blocks(_) => None,
        }
    }

    /// Forgets every position from `len` on.
    /// Rows appended but not committed are dropped too.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for ((keys, values), width) in self.keys.iter_mut().zip(&mut self.values).zip(&self.value_widths) {
            match keys {
                LayerKeys::Blocks(blocks) => blocks.truncate(len),
                LayerKeys::Rows { rows, width } => rows.truncate(len * *width),
            }
            values.truncate(len * width);
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

    /// Bytes of the positions held now.
    pub fn bytes(&self) -> usize {
        let keys: usize = self
            .keys
            .iter()
            .map(|k| match k {
                LayerKeys::Blocks(blocks) => blocks.bytes(),
                LayerKeys::Rows { rows, .. } => rows.len() * 4,
            })
            .sum();
        keys + self.values.iter().map(|v| v.len() * 4).sum::<usize>()
    }
}
