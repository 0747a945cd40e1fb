//! `*` globs as used by `models`, `matchModels` (StringLike) and allow-lists.

/// True when `text` matches `pattern`, where `*` matches any run of characters (including none)
/// and every other character matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|b| *b == b'*')
}

pub fn is_glob(pattern: &str) -> bool {
    pattern.contains('*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("gpt-4.1*", "gpt-4.1"));
        assert!(glob_match("gpt-4.1*", "gpt-4.1-mini"));
        assert!(!glob_match("gpt-4.1*", "gpt-4o"));
        assert!(glob_match("*", ""));
        assert!(glob_match("claude-*-4-5", "claude-sonnet-4-5"));
        assert!(!glob_match("claude-*-4-5", "claude-sonnet-4-6"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exact2"));
    }
}
