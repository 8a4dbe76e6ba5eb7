//! Which requests are logged when a model's `sample-rate` is below 1: a contract between the
//! sidecar, which logs the requests in the sample, and the impression side (the joiner's
//! `input.events-sample-rate`), which keeps only their events.
//!
//! The decision is a pure function of the request id, so any other system (the app that
//! publishes impressions, a Spark job) can compute the same one: take the 64-bit FNV-1a hash of
//! the request id's UTF-8 bytes; the request is sampled when `hash % 1_000_000` is below
//! `rate * 1_000_000` rounded down, the product taken in IEEE 754 double precision (as
//! `int(rate * 1_000_000)` in Python, a `double` in Java or Spark). Exact decimal arithmetic
//! (SQL `DECIMAL`, `BigDecimal`) differs for a few rates, such as 0.0157 (15,699 here, not
//! 15,700): one residue in a million.

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// True when the request with this id is in the sample of `rate` (0..=1).
pub fn sampled(request_id: &str, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    let threshold = (rate.max(0.0) * 1_000_000.0) as u64;
    fnv1a64(request_id.as_bytes()) % 1_000_000 < threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_sampled_fraction_is_close_to_the_rate_and_stable() {
        let hits = (0..100_000)
            .filter(|i| sampled(&format!("req-{i}"), 0.1))
            .count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        assert!(sampled("anything", 1.0));
        assert!(!sampled("anything", 0.0));
    }

    /// The impression side reimplements the rule from the module's documentation, so these
    /// decisions were computed from that text by a separate implementation (a few lines of
    /// Python), not by this one. Each id comes in a pair of rates either side of its
    /// `hash % 1_000_000` (shown), so a change of the hash, the modulus, the rounding or the
    /// comparison flips at least one of them.
    #[test]
    fn the_sample_is_the_one_the_documented_rule_selects() {
        let cases = [
            ("req-0", 0.25, true), // 241886
            ("req-0", 0.24, false),
            ("req-7", 0.13, true), // 126519
            ("req-7", 0.12, false),
            ("req-2", 0.99, true), // 985464
            ("req-2", 0.98, false),
            // The bound is strict: a residue equal to the threshold is out of the sample.
            ("req-42", 0.298_889, true), // 298888
            ("req-42", 0.298_888, false),
            // Hashed as UTF-8 bytes, not UTF-16 units or chars.
            ("é-unicode", 0.8, true), // 799159
            ("é-unicode", 0.79, false),
            ("4f9c2a1e-7b3d-4e8a-9c1f-2d5b6a7e8f90", 0.34, true), // 334516
            ("4f9c2a1e-7b3d-4e8a-9c1f-2d5b6a7e8f90", 0.33, false),
        ];
        for (request_id, rate, expected) in cases {
            assert_eq!(
                sampled(request_id, rate),
                expected,
                "request {request_id:?} at rate {rate}"
            );
        }
    }
}
