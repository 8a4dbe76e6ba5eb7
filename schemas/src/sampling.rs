//! Which requests are logged when a model's `sample-rate` is below 1: a contract between the
//! sidecar, which logs the requests in the sample, and the impression side (the joiner's
//! `input.events-sample-rate`), which keeps only their events.
//!
//! The decision is a pure function of the request id, so any other system (the app that
//! publishes impressions, a Spark job) can compute the same one: take the 64-bit FNV-1a hash of
//! the request id's UTF-8 bytes; the request is sampled when `hash % 1_000_000` is below
//! `rate * 1_000_000` (rounded down).

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
        assert_eq!(sampled("req-42", 0.1), sampled("req-42", 0.1));
        assert!(sampled("anything", 1.0));
        assert!(!sampled("anything", 0.0));
    }
}
