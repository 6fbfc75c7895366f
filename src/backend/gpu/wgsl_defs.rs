//! Shader variants from one WGSL template: `#ifdef NAME`, `#ifndef NAME`, `#else` and
//! `#endif` lines (nested) keep or drop the lines between them, and `#include FILE` puts a
//! shared declaration file in its place (expanded with the same defines), as ggml's WebGPU
//! backend expands its templates; every other line is kept as it is. A template names its
//! variants' differences once (the weight format, decode or prefill) instead of a file per
//! variant, and a declaration two kernels share is written once.

/// Expands `template` with the names in `defines` set, `#include FILE` taking FILE from
/// `includes` (name, source). An unbalanced or unknown directive, or an unknown or recursive
/// include, is an error naming its line (a template is ours, so this is a bug the tests catch).
pub fn expand(template: &str, defines: &[&str], includes: &[(&str, &str)]) -> Result<String, String> {
    expand_nested(template, defines, includes, 0)
}

/// Includes deeper than this are taken for a cycle.
const MAX_INCLUDE_DEPTH: usize = 8;

fn expand_nested(template: &str, defines: &[&str], includes: &[(&str, &str)], depth: usize) -> Result<String, String> {
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
            Some("#include") => {
                let name = words.next().ok_or_else(|| format!("line {}: #include without a file", n + 1))?;
                if !kept(&open) {
                    continue;
                }
                let (_, source) =
                    includes.iter().find(|(file, _)| *file == name).ok_or_else(|| format!("line {}: no include {name}", n + 1))?;
                if depth >= MAX_INCLUDE_DEPTH {
                    return Err(format!("line {}: includes nested deeper than {MAX_INCLUDE_DEPTH} (a cycle?)", n + 1));
                }
                out.push_str(&expand_nested(source, defines, includes, depth + 1).map_err(|e| format!("{name}: {e}"))?);
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
        assert_eq!(expand(T, &[], &[]).as_deref(), Ok("a\nnot x\nb\n"));
        assert_eq!(expand(T, &["X"], &[]).as_deref(), Ok("a\nx\nnot y\nb\n"));
        assert_eq!(expand(T, &["X", "Y"], &[]).as_deref(), Ok("a\nx\ny\nb\n"));
        assert_eq!(expand(T, &["Y"], &[]).as_deref(), Ok("a\nnot x\nb\n"));
    }

    #[test]
    fn includes_shared_files_with_the_same_defines() {
        let includes = [("s.wgsl", "#ifdef X\nsx\n#endif\ns\n"), ("t.wgsl", "#include s.wgsl\nt\n")];
        assert_eq!(expand("a\n#include t.wgsl\nb\n", &["X"], &includes).as_deref(), Ok("a\nsx\ns\nt\nb\n"));
        assert_eq!(expand("#ifdef Y\n#include nowhere.wgsl\n#endif\n", &[], &includes).as_deref(), Ok(""));
        assert!(expand("#include nowhere.wgsl\n", &[], &includes).is_err());
        assert!(expand("#include c.wgsl\n", &[], &[("c.wgsl", "#include c.wgsl\n")]).is_err(), "a cycle");
    }

    #[test]
    fn refuses_unbalanced_and_unknown_directives() {
        for bad in ["#ifdef X\n", "#endif\n", "#else\n", "#ifdef X\n#else\n#else\n#endif\n", "#define X\n", "#ifdef\n#endif\n"] {
            assert!(expand(bad, &["X"], &[]).is_err(), "{bad:?} was accepted");
        }
    }
}
