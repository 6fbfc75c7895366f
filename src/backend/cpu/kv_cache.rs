//! The CPU KV cache: per layer, keys and values of every position so far.

/// Keys and values of every layer, `[layer][pos, kv_dim]` each, grown as tokens arrive
/// (never preallocated to the full context, which would be hundreds of MB in wasm).
pub struct KvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `n_layers` layers of `kv_dim` floats per position.
    pub fn new(n_layers: usize, kv_dim: usize, capacity: usize) -> Self {
        KvCache { keys: vec![Vec::new(); n_layers], values: vec![Vec::new(); n_layers], kv_dim, len: 0, capacity }
    }

    /// Appends `n` positions to one layer. Shapes: `k`, `v`: `[n, kv_dim]`.
    /// Call for every layer, then [`KvCache::commit`].
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        self.keys[layer].extend_from_slice(k);
        self.values[layer].extend_from_slice(v);
    }

    /// Marks `n` appended positions as complete in every layer.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Keys and values of one layer, `[positions, kv_dim]`, including uncommitted rows.
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        (&self.keys[layer], &self.values[layer])
    }

    /// Forgets every position from `len` on.
    /// Rows appended but not committed are dropped too.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for layer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            layer.truncate(len * self.kv_dim);
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
