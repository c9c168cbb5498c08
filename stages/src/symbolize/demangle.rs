//! Names as Debian's perf 6.1 prints them (`demangle_sym`: libiberty's `cplus_demangle` with
//! `DMGL_NO_OPTS`, which tries Rust first): C++ without parameters or return types
//! (`ns::W<long>::spin`), Rust without the hash (`std::rt::lang_start::{{closure}}`, v0
//! without disambiguators); anything else as it is.

use cpp_demangle::{DemangleOptions, Symbol};

/// The demangled name, or `None` when `raw` is not a mangled C++ or Rust name.
pub fn demangle(raw: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(raw).ok()?;
    if is_rust(s) {
        if let Ok(d) = rustc_demangle::try_demangle(s) {
            return Some(format!("{d:#}"));
        }
    }
    if !s.starts_with("_Z") {
        return None;
    }
    let sym = Symbol::new(raw).ok()?;
    let opts = DemangleOptions::new().no_params().no_return_type();
    sym.demangle_with_options(&opts).ok()
}

/// A Rust v0 name (`_R…`), or a legacy one: `_ZN…17h<16 hex>E`, maybe with a `.llvm.…` suffix
/// (libiberty's `rust_is_mangled` needs the hash; without one it is C++).
fn is_rust(s: &str) -> bool {
    if s.starts_with("_R") {
        return true;
    }
    if !s.starts_with("_ZN") {
        return false;
    }
    let s = s.split('.').next().unwrap_or(s);
    let Some(body) = s.strip_suffix('E') else {
        return false;
    };
    body.len() > 20 && {
        let (pre, hash) = body.split_at(body.len() - 19);
        pre.len() > 3
            && hash.starts_with("17h")
            && hash[3..].bytes().all(|c| c.is_ascii_hexdigit())
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cpp_without_params() {
        assert_eq!(
            demangle(b"_ZN2ns1WIlE4spinEl").as_deref(),
            Some("ns::W<long>::spin")
        );
        assert_eq!(demangle(b"_Z4workRSt6vectorIlSaIlEE").as_deref(), Some("work"));
        assert_eq!(demangle(b"main"), None);
        assert_eq!(demangle(b"_Zgarbage"), None);
    }

    #[test]
    fn rust_without_hash() {
        assert_eq!(
            demangle(b"_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE")
                .as_deref(),
            Some("std::rt::lang_start::{{closure}}")
        );
        assert_eq!(
            demangle(b"_ZN1r4spin17h1d1e45a5bbad1bfbE.llvm.123").as_deref(),
            Some("r::spin")
        );
        assert_eq!(demangle(b"_RNvCs1234_1r4spin").as_deref(), Some("r::spin"));
    }
}
