//! The CPU KV cache: per layer, keys and values of every position so far.

/// Keys and values of every layer, `[layer][pos, width]` each, grown as tokens arrive
/// (never preallocated to the full context, which would be hundreds of MB in wasm). A
/// convolving layer (LFM2's) keeps its gated inputs `b * x'` as its keys, `[pos, dim]`, and no
/// values: like keys, one row per position, so a cut back to a position forgets them too.
pub struct KvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    /// Floats per position of each layer's keys and of its values.
    widths: Vec<(usize, usize)>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for the layers of `cfg`: `kv_dim` keys and values where a layer
    /// attends, `dim` gated inputs where it convolves.
    pub fn for_model(cfg: &crate::model::Config, capacity: usize) -> Self {
        let widths = (0..cfg.n_layers).map(|l| if cfg.is_conv_layer(l) { (cfg.dim, 0) } else { (cfg.kv_dim(), cfg.kv_dim()) });
        Self::with_widths(widths.collect(), capacity)
    }

    /// An empty cache whose layer `l` holds `widths[l]` floats of keys and of values per
    /// position.
    fn with_widths(widths: Vec<(usize, usize)>, capacity: usize) -> Self {
        KvCache { keys: vec![Vec::new(); widths.len()], values: vec![Vec::new(); widths.len()], widths, len: 0, capacity }
    }

    /// Appends `n` positions to one layer. Shapes: `k`, `v`: `[n, width]`, the layer's.
    /// Call for every layer, then [`KvCache::commit`].
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        self.keys[layer].extend_from_slice(k);
        self.values[layer].extend_from_slice(v);
    }

    /// Appends `n` positions of zeros to one layer (a layer a pass skips).
    pub fn append_zeros(&mut self, layer: usize, n: usize) {
        let (key_width, value_width) = self.widths[layer];
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        keys.resize(keys.len() + n * key_width, 0.0);
        values.resize(values.len() + n * value_width, 0.0);
    }

    /// Marks `n` appended positions as complete in every layer.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Keys and values of one layer, `[positions, width]`, including uncommitted rows.
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        (&self.keys[layer], &self.values[layer])
    }

    /// Forgets every position from `len` on.
    /// Rows appended but not committed are dropped too.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for ((keys, values), (key_width, value_width)) in self.keys.iter_mut().zip(&mut self.values).zip(&self.widths) {
            keys.truncate(len * key_width);
            values.truncate(len * value_width);
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

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.keys.iter().chain(self.values.iter()).map(|l| l.len() * 4).sum()
    }
}
