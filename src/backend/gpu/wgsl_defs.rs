//! Shader variants from one WGSL template: `#ifdef NAME`, `#ifndef NAME`, `#else` and
//! `#endif` lines (nested) keep or drop the lines between them, as ggml's WebGPU backend
//! expands its templates; every other line is kept as it is. A template names its variants'
//! differences once (the weight format, decode or prefill) instead of a file per variant.

/// Expands `template` with the names in `defines` set. An unbalanced or unknown directive is
/// an error naming its line (a template is ours, so this is a bug caught by the tests).
pub fn expand(template: &str, defines: &[&str]) -> Result<String, String> {
    // One entry per open #ifdef: (whether its branch is kept, whether an #else was seen).
    let mut open: Vec<(bool, bool)> = Vec::new();
    let mut out = String::with_capacity(template.len());
    let kept = |open: &[(bool, bool)]| open.iter().all(|(keep, _)| *keep);
    for (n, line) in template.lines().enumerate() {
        let directive = line.trim_start();
        let mut words = directive.split_whitespace();
        match words.next() {
            Some(d @ ("#ifdef" | "#ifndef")) => {
                let name = words.next().ok_or_else(|| format!("line {}: {d} without a name", n + 1))?;
                open.push((defines.contains(&name) == (d == "#ifdef"), false));
            }
            Some("#else") => match open.last_mut() {
                Some((keep, seen_else @ false)) => {
                    *keep = !*keep;
                    *seen_else = true;
                }
                _ => return Err(format!("line {}: #else without its #ifdef, or a second #else", n + 1)),
            },
            Some("#endif") => {
                open.pop().ok_or_else(|| format!("line {}: #endif without its #ifdef", n + 1))?;
            }
            Some(d) if d.starts_with('#') => return Err(format!("line {}: unknown directive {d}", n + 1)),
            _ => {
                if kept(&open) {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    if !open.is_empty() {
        return Err(format!("{} #ifdef without #endif", open.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::expand;

    const T: &str = "a\n#ifdef X\nx\n#ifndef Y\nnot y\n#else\ny\n#endif\n#else\nnot x\n#endif\nb\n";

    #[test]
    fn keeps_the_branches_the_defines_choose() {
        assert_eq!(expand(T, &[]).as_deref(), Ok("a\nnot x\nb\n"));
        assert_eq!(expand(T, &["X"]).as_deref(), Ok("a\nx\nnot y\nb\n"));
        assert_eq!(expand(T, &["X", "Y"]).as_deref(), Ok("a\nx\ny\nb\n"));
        assert_eq!(expand(T, &["Y"]).as_deref(), Ok("a\nnot x\nb\n"));
    }

    #[test]
    fn refuses_unbalanced_and_unknown_directives() {
        for bad in ["#ifdef X\n", "#endif\n", "#else\n", "#ifdef X\n#else\n#else\n#endif\n", "#define X\n", "#ifdef\n#endif\n"] {
            assert!(expand(bad, &["X"]).is_err(), "{bad:?} was accepted");
        }
    }
}
