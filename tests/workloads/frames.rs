//! Rust workload for the folded-stack oracle: generics, a trait object, closures and threads, built
//! with `rustc -C force-frame-pointers=yes -C opt-level=2 -g`. Hot functions are `#[inline(never)]`
//! so their frames stay; the standard library is not built with frame pointers, so the stacks end
//! in it.

use std::hint::black_box;

trait Shape {
    fn area(&self, scale: u64) -> u64;
}

struct Square(u64);

impl Shape for Square {
    #[inline(never)]
    fn area(&self, scale: u64) -> u64 {
        let mut a = 0u64;
        for i in 0..scale {
            a = a.wrapping_add(black_box(self.0 * i) ^ (a >> 5));
        }
        a
    }
}

#[inline(never)]
fn checksum<T: Copy + Into<u64>>(items: &[T], rounds: u32) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..rounds {
        for &x in items {
            h = (h ^ x.into()).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

#[inline(never)]
fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

#[inline(never)]
fn spin(which: usize, rounds: u32) -> u64 {
    let shape: Box<dyn Shape> = Box::new(Square(which as u64 + 3));
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 31) as u8).collect();
    let mut total = 0u64;
    for r in 0..rounds {
        total = total.wrapping_add(match which {
            0 => checksum(&bytes, 1000),
            1 => shape.area(4_000_000),
            _ => fib(26 + r % 2),
        });
    }
    total
}

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let workers: Vec<_> = (0..3)
        .map(|which| {
            std::thread::Builder::new()
                .name(format!("frames-{which}"))
                .spawn(move || spin(which, rounds))
                .expect("spawn")
        })
        .collect();
    let sum: u64 = workers.into_iter().map(|w| w.join().expect("join")).sum();
    black_box(sum);
}
