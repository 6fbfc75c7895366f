//! Prompt lookup, a drafter without a model: when the text ends with words it has seen
//! before (code, lists, a question quoted back), guess that what followed them then
//! follows them now.

/// Longest n-gram looked up.
pub const MAX_NGRAM: usize = 4;

/// Up to `k` tokens that followed the most recent earlier occurrence of the longest n-gram
/// (n = [`MAX_NGRAM`] down to 1) that ends `context`; empty when even its last token is new.
pub fn propose(context: &[u32], k: usize) -> Vec<u32> {
    let len = context.len();
    for n in (1..=MAX_NGRAM.min(len.saturating_sub(1))).rev() {
        let tail = &context[len - n..];
        // Starts before `len - n`: an occurrence other than the tail itself, with at least
        // one token after it.
        if let Some(s) = (0..len - n).rev().find(|&s| &context[s..s + n] == tail) {
            return context[s + n..(s + n + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::propose;

    #[test]
    fn proposes_what_followed_the_longest_match() {
        // "1 2 3 9 | 5 2 3 7 | 2 3": the 2-gram "2 3" last appeared before 7.
        assert_eq!(propose(&[1, 2, 3, 9, 5, 2, 3, 7, 2, 3], 3), vec![7, 2, 3]);
        // The 3-gram "5 2 3" beats the 2-gram's more recent occurrence.
        assert_eq!(propose(&[5, 2, 3, 8, 1, 2, 3, 6, 5, 2, 3], 2), vec![8, 1]);
        // Only the last token repeats.
        assert_eq!(propose(&[4, 6, 1, 4], 8), vec![6, 1, 4]);
        // Nothing repeats, or nothing to look at.
        assert!(propose(&[1, 2, 3], 4).is_empty());
        assert!(propose(&[1], 4).is_empty());
        // k caps the proposal, and so does the end of the context.
        assert_eq!(propose(&[1, 2, 3, 4, 5, 1], 2), vec![2, 3]);
        assert_eq!(propose(&[7, 7, 7, 7, 7], 4), vec![7]);
    }
}
