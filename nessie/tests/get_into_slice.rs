//! `Client::get_into_slice`: a GET into the caller's buffer, with a typed
//! error that carries the room a value needs.

use nessie::{Cluster, Config, Error, Optimizations};

fn cluster(optimizations: Optimizations) -> Cluster {
    Cluster::local(Config {
        index_slots_per_node: 1024,
        data_bytes_per_node: 8 << 20,
        value_size_max: 64 << 10,
        optimizations,
        ..Config::default()
    })
    .unwrap()
}

#[test]
fn a_value_that_fits_lands_at_the_start_of_the_slice() {
    for opts in [Optimizations::default(), Optimizations::none()] {
        let cluster = cluster(opts);
        let mut writer = cluster.client(1).unwrap();
        // Node 0 reads node 1's entries remotely: the second GET of a key
        // comes from the DTE cache when it is on, and must fill the same.
        let mut reader = cluster.client(0).unwrap();
        let value: Vec<u8> = (0..16 << 10).map(|i| (i % 251) as u8).collect();
        writer.put(b"big", &value).unwrap();
        for _ in 0..2 {
            let mut buf = vec![0xee; value.len() + 10];
            assert_eq!(
                reader.get_into_slice(b"big", &mut buf).unwrap(),
                Some(value.len())
            );
            assert_eq!(&buf[..value.len()], &value[..]);
            assert!(buf[value.len()..].iter().all(|&b| b == 0xee), "tail kept");
        }
        let mut exact = vec![0; value.len()];
        assert_eq!(
            reader.get_into_slice(b"big", &mut exact).unwrap(),
            Some(value.len())
        );
        assert_eq!(exact, value);
        assert_eq!(reader.stats().get.errors, 0);
    }
}

#[test]
fn a_slice_too_small_is_a_typed_error_with_the_needed_length() {
    let cluster = cluster(Optimizations::default());
    let mut c = cluster.client(0).unwrap();
    c.put(b"k", &[7; 300]).unwrap();
    let mut small = [1u8; 299];
    match c.get_into_slice(b"k", &mut small) {
        Err(Error::BufferTooSmall { needed, capacity }) => {
            assert_eq!((needed, capacity), (300, 299));
        }
        other => panic!("expected BufferTooSmall, got {other:?}"),
    }
    assert!(small.iter().all(|&b| b == 1), "nothing copied");
    let msg = c.get_into_slice(b"k", &mut []).unwrap_err().to_string();
    assert!(msg.contains("300"), "{msg}");
    assert_eq!(c.stats().get.errors, 2);
    // The empty value fits an empty slice.
    c.put(b"empty", b"").unwrap();
    assert_eq!(c.get_into_slice(b"empty", &mut []).unwrap(), Some(0));
}

#[test]
fn a_missing_key_is_none_and_bad_keys_are_refused() {
    let cluster = cluster(Optimizations::default());
    let mut c = cluster.client(2).unwrap();
    let mut buf = [9u8; 8];
    assert_eq!(c.get_into_slice(b"nobody", &mut buf).unwrap(), None);
    c.put(b"gone", b"x").unwrap();
    assert!(c.delete(b"gone").unwrap());
    assert_eq!(c.get_into_slice(b"gone", &mut buf).unwrap(), None);
    assert_eq!(buf, [9; 8]);
    assert!(matches!(
        c.get_into_slice(b"", &mut buf),
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        c.get_into_slice(&[b'k'; 200], &mut buf),
        Err(Error::KeyTooLarge)
    ));
}
