//! Names as Debian's perf 6.1 prints them (`demangle_sym`: libiberty's `cplus_demangle` with
//! `DMGL_NO_OPTS`, which tries Rust first): C++ without parameters or return types
//! (`ns::W<long>::spin`), Rust without the hash (`std::rt::lang_start::{{closure}}`, v0
//! without disambiguators); anything else as it is.

use cpp_demangle::{DemangleOptions, Symbol};

/// The demangled name, or `None` when `raw` is not a mangled C++ or Rust name.
pub fn demangle(raw: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(raw).ok()?;
    if is_rust(s) {
        // libiberty ignores a suffix (`.llvm.123`, `.warm`): after the hash's `E`, or after
        // a v0 name (which has no dots).
        let base = match legacy_end(s) {
            Some(end) => &s[..end],
            None => s.split('.').next().unwrap_or(s),
        };
        if let Ok(d) = rustc_demangle::try_demangle(base) {
            return Some(format!("{d:#}"));
        }
    }
    if !s.starts_with("_Z") {
        return None;
    }
    // Thunks: libiberty prints the target with its parameters even without DMGL_PARAMS.
    for (pre, what) in [
        ("_ZThn", "non-virtual thunk to "),
        ("_ZTv", "virtual thunk to "),
        ("_ZTc", "covariant return thunk to "),
    ] {
        if let Some(rest) = s.strip_prefix(pre) {
            let target = skip_call_offsets(rest, pre)?;
            let mangled = format!("_Z{target}");
            let sym = Symbol::new(mangled.as_bytes()).ok()?;
            return Some(format!("{what}{}", sym.demangle().ok()?));
        }
    }
    let sym = Symbol::new(raw).ok()?;
    let opts = DemangleOptions::new().no_params().no_return_type();
    let d = sym.demangle_with_options(&opts).ok()?;
    Some(like_libiberty(d))
}

/// The encoding after a thunk's call offsets (`h <offset> _`, `v <offset> _ <offset> _`; a
/// covariant thunk has two).
fn skip_call_offsets<'a>(rest: &'a str, pre: &str) -> Option<&'a str> {
    let one = |r: &'a str, n: usize| -> Option<&'a str> {
        let mut r = r;
        for _ in 0..n {
            r = &r[r.find('_')? + 1..];
        }
        Some(r)
    };
    match pre {
        "_ZThn" => one(rest, 1),
        "_ZTv" => one(rest, 2),
        _ => {
            // Two call offsets, each `h…_` or `v…_…_`.
            let mut r = rest;
            for _ in 0..2 {
                let n = if r.starts_with('v') { 2 } else { 1 };
                r = one(r, n)?;
            }
            Some(r)
        }
    }
}

/// Where `cpp_demangle` without parameters prints differently from libiberty's
/// `cplus_demangle(DMGL_NO_OPTS)`: an empty pack (`<T, >`), integer literals
/// (`(unsigned int)8` for `8u`), and a member function's cv-qualifiers at the end.
fn like_libiberty(mut d: String) -> String {
    if d.contains(", >") {
        d = d.replace(", >", ">");
    }
    if d.contains('(') {
        for (ty, suffix) in [
            ("(unsigned int)", "u"),
            ("(unsigned long)", "ul"),
            ("(unsigned long long)", "ull"),
            ("(long)", "l"),
            ("(long long)", "ll"),
        ] {
            while let Some(i) = d.find(ty) {
                let digits = d[i + ty.len()..]
                    .bytes()
                    .take_while(|c| c.is_ascii_digit() || *c == b'-')
                    .count();
                if digits == 0 {
                    break;
                }
                let num = d[i + ty.len()..i + ty.len() + digits].to_string();
                d.replace_range(i..i + ty.len() + digits, &format!("{num}{suffix}"));
            }
        }
    }
    for q in [" const", " volatile", " &&", " &"] {
        while d.ends_with(q) {
            d.truncate(d.len() - q.len());
        }
    }
    d
}

/// A Rust v0 name (`_R…`), or a legacy one: `_ZN…17h<16 hex>E`, maybe with a suffix
/// (libiberty's `rust_is_mangled` needs the hash; without one it is C++).
fn is_rust(s: &str) -> bool {
    s.starts_with("_R") || legacy_end(s).is_some()
}

/// Where a legacy Rust name ends: just after the `E` that closes its `17h<16 hex>` hash.
fn legacy_end(s: &str) -> Option<usize> {
    if !s.starts_with("_ZN") {
        return None;
    }
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = s[from..].find("17h").map(|i| i + from) {
        let h = i + 3;
        if b.len() > h + 16 && b[h..h + 16].iter().all(u8::is_ascii_hexdigit) && b[h + 16] == b'E' {
            return Some(h + 17);
        }
        from = i + 1;
    }
    None
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
        assert_eq!(
            demangle(b"_Z4workRSt6vectorIlSaIlEE").as_deref(),
            Some("work")
        );
        assert_eq!(demangle(b"main"), None);
        // Where cpp_demangle differs from libiberty, perf's output.
        assert_eq!(
            demangle(
                b"_ZN4llvm11PassManagerINS_8FunctionENS_15AnalysisManagerIS1_JEEEJEE3runERS1_RS3_"
            )
            .as_deref(),
            Some("llvm::PassManager<llvm::Function, llvm::AnalysisManager<llvm::Function>>::run")
        );
        assert_eq!(
            demangle(b"_ZN4llvm11SmallPtrSetIPvLj8EE4findES1_").as_deref(),
            Some("llvm::SmallPtrSet<void*, 8u>::find")
        );
        assert_eq!(demangle(b"_ZNK1A1fEv").as_deref(), Some("A::f"));
        assert_eq!(
            demangle(b"_ZThn40_N4llvm17VPSingleDefRecipeD1Ev").as_deref(),
            Some("non-virtual thunk to llvm::VPSingleDefRecipe::~VPSingleDefRecipe()")
        );
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
        assert_eq!(
            demangle(b"_ZN1r4spin17h1d1e45a5bbad1bfbE.warm").as_deref(),
            Some("r::spin")
        );
        assert_eq!(demangle(b"_RNvCs1234_1r4spin").as_deref(), Some("r::spin"));
        assert_eq!(
            demangle(b"_RNvCs1234_1r4spin.warm").as_deref(),
            Some("r::spin")
        );
        assert_eq!(
            demangle(b"_ZN4core3ptr57drop_in_place$LT$std..io..error..repr_bitpacked..Repr$GT$17hb014358f923db8dfE")
                .as_deref(),
            Some("core::ptr::drop_in_place<std::io::error::repr_bitpacked::Repr>")
        );
    }
}
