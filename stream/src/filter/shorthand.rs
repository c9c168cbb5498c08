//! The shorthand flags, with `perf script`'s syntax, as expressions: `--pid 1,2`, `--tid`,
//! `--comm bash,gzip`, `--cpu 0-2,5` and `--time START,END`.

use super::expr::{decimal_scaled, CmpOp, Expr, ExprError, Field, Value};

fn err(src: &str, column: usize, message: String, hint: &str) -> ExprError {
    ExprError {
        expr: src.to_string(),
        column,
        message,
        hint: Some(hint.to_string()),
    }
}

/// Comma-separated items of `src` with their 1-based columns.
fn items(src: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut col = 1;
    src.split(',').map(move |item| {
        let at = col;
        col += item.chars().count() + 1;
        (at, item.trim())
    })
}

fn any_of(field: Field, values: Vec<Value>) -> Expr {
    Expr::In(field, values)
}

/// `--pid`/`--tid`: a comma-separated list of ids (`perf script --pid 1,2`).
///
/// # Errors
/// When an item is not a number.
pub fn id_list(field: Field, src: &str) -> Result<Expr, ExprError> {
    let mut v = Vec::new();
    for (col, item) in items(src) {
        match item.parse::<u32>() {
            Ok(n) => v.push(Value::Num(u64::from(n))),
            Err(_) => {
                return Err(err(
                    src,
                    col,
                    format!("`{item}` is not a {}", field.name()),
                    "a comma-separated list of numbers: 1234,1240",
                ))
            }
        }
    }
    Ok(any_of(field, v))
}

/// `--cpu`: a cpu list as perf takes it, `0-2,5`.
///
/// # Errors
/// When an item is not a cpu or a range `lo-hi` with lo ≤ hi.
pub fn cpu_list(src: &str) -> Result<Expr, ExprError> {
    let mut v = Vec::new();
    for (col, item) in items(src) {
        let range = match item.split_once('-') {
            Some((lo, hi)) => lo.parse::<u32>().ok().zip(hi.parse::<u32>().ok()),
            None => item.parse::<u32>().ok().map(|n| (n, n)),
        };
        match range {
            Some((lo, hi)) if lo <= hi && hi - lo < 65536 => {
                v.extend((lo..=hi).map(|c| Value::Num(u64::from(c))))
            }
            _ => {
                return Err(err(
                    src,
                    col,
                    format!("`{item}` is not a cpu or cpu range"),
                    "a cpu list: 0-2,5",
                ))
            }
        }
    }
    Ok(any_of(Field::Cpu, v))
}

/// `--comm`: a comma-separated list of exact names (`perf script --comm bash,gzip`).
///
/// # Errors
/// When the list has an empty name.
pub fn name_list(src: &str) -> Result<Expr, ExprError> {
    let mut v = Vec::new();
    for (col, item) in items(src) {
        if item.is_empty() {
            return Err(err(
                src,
                col,
                "empty name".into(),
                "a comma-separated list: bash,gzip",
            ));
        }
        // Exact names, as perf compares them: escape glob characters.
        let mut glob = String::new();
        for c in item.chars() {
            if "*?[\\".contains(c) {
                glob.push('\\');
            }
            glob.push(c);
        }
        v.push(Value::Str(glob));
    }
    Ok(any_of(Field::Comm, v))
}

/// `--time START,END`: absolute times in seconds as perf script prints them (`12345.678901`),
/// either side may be empty; both ends are included, as `perf_time__skip_sample()` does.
///
/// # Errors
/// Without a comma, or when a side is not a time or END < START.
pub fn time_range(src: &str) -> Result<Expr, ExprError> {
    let Some((start, end)) = src.split_once(',') else {
        return Err(err(
            src,
            1,
            "expected START,END".into(),
            "seconds as perf script prints them: 12345.5,12346 (either side may be empty)",
        ));
    };
    let parse = |s: &str, col: usize| -> Result<Option<u64>, ExprError> {
        let t = s.trim();
        if t.is_empty() {
            return Ok(None);
        }
        decimal_scaled(t, 9).map(Some).ok_or_else(|| {
            err(
                src,
                col,
                format!("`{t}` is not a time in seconds"),
                "seconds with up to 9 decimals: 12345.678901 (percentages are not supported)",
            )
        })
    };
    let lo = parse(start, 1)?;
    let hi = parse(end, start.chars().count() + 2)?;
    if let (Some(l), Some(h)) = (lo, hi) {
        if h < l {
            return Err(err(
                src,
                start.chars().count() + 2,
                "END is before START".into(),
                "--time START,END with START <= END",
            ));
        }
    }
    let cmp = |op, v| Expr::Cmp(Field::Time, op, Value::Num(v));
    Ok(match (lo, hi) {
        (Some(l), Some(h)) => Expr::And(Box::new(cmp(CmpOp::Ge, l)), Box::new(cmp(CmpOp::Le, h))),
        (Some(l), None) => cmp(CmpOp::Ge, l),
        (None, Some(h)) => cmp(CmpOp::Le, h),
        // perf treats an empty range as no filter.
        (None, None) => Expr::Not(Box::new(Expr::In(Field::Time, Vec::new()))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(
            cpu_list("0-2,5").unwrap(),
            Expr::In(Field::Cpu, [0, 1, 2, 5].map(Value::Num).to_vec())
        );
        assert_eq!(cpu_list("1,x").unwrap_err().column, 3);
        assert_eq!(
            id_list(Field::Pid, "12, 13").unwrap(),
            Expr::In(Field::Pid, vec![Value::Num(12), Value::Num(13)])
        );
        assert_eq!(id_list(Field::Tid, "12,-1").unwrap_err().column, 4);
        assert_eq!(
            name_list("a*").unwrap(),
            Expr::In(Field::Comm, vec![Value::Str("a\\*".into())])
        );
        assert!(name_list("a,,b").is_err());
    }

    #[test]
    fn times() {
        let ge = |v| Expr::Cmp(Field::Time, CmpOp::Ge, Value::Num(v));
        let le = |v| Expr::Cmp(Field::Time, CmpOp::Le, Value::Num(v));
        assert_eq!(time_range("1.5,").unwrap(), ge(1_500_000_000));
        assert_eq!(time_range(",2").unwrap(), le(2_000_000_000));
        assert_eq!(
            time_range("1,2").unwrap(),
            Expr::And(Box::new(ge(1_000_000_000)), Box::new(le(2_000_000_000)))
        );
        assert_eq!(time_range("3,2").unwrap_err().column, 3);
        assert_eq!(time_range("x,2").unwrap_err().column, 1);
        assert!(time_range("12").is_err());
    }
}
