//! The state store in Redis (`toolcage::state::RedisStore`), against a real
//! Debian `redis-server` on 127.0.0.1 (a fresh port, a password, nothing
//! saved to disk): what a store promises (a value until its expiry, a take
//! that one taker gets, keys of one prefix only), a Redis that cannot be
//! reached, and one lost and restarted empty while a store uses it. Replicas
//! sharing it over MCP: tests/clients/test_shared_state.py.

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolcage::state::{RedisOptions, RedisStore, StateStore};
use toolcage_tests::Redis;

fn block<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn options(redis: &Redis) -> RedisOptions {
    RedisOptions::new(redis.url()).password(&redis.password)
}

#[test]
fn a_redis_store_keeps_until_expiry_takes_once_and_keeps_to_its_prefix() {
    let redis = Redis::start();
    block(async {
        let store = RedisStore::connect(&options(&redis)).await.unwrap();
        let other = RedisStore::connect(&options(&redis).prefix("other:"))
            .await
            .unwrap();
        let hour = Duration::from_secs(3600);
        store.put("k", b"value".to_vec(), hour).await.unwrap();
        assert_eq!(
            store.get("k").await.unwrap().as_deref(),
            Some(&b"value"[..])
        );
        assert_eq!(other.get("k").await.unwrap(), None, "another prefix");
        assert_eq!(
            store.take("k").await.unwrap().as_deref(),
            Some(&b"value"[..])
        );
        assert_eq!(store.take("k").await.unwrap(), None, "taken once");
        store.put("d", vec![0, 255, 1], hour).await.unwrap();
        store.delete("d").await.unwrap();
        assert_eq!(store.get("d").await.unwrap(), None);
        store
            .put("brief", b"x".to_vec(), Duration::from_millis(50))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(store.get("brief").await.unwrap(), None, "expired");
        // A megabyte goes and comes back whole.
        let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        store.put("big", big.clone(), hour).await.unwrap();
        assert_eq!(store.get("big").await.unwrap(), Some(big));
    });
}

#[test]
fn of_replicas_taking_one_key_at_once_one_gets_it() {
    let redis = Redis::start();
    block(async {
        let stores = [
            Arc::new(RedisStore::connect(&options(&redis)).await.unwrap()),
            Arc::new(RedisStore::connect(&options(&redis)).await.unwrap()),
        ];
        for n in 0..50 {
            let key = format!("nonce-{n}");
            stores[0]
                .put(&key, b"unused".to_vec(), Duration::from_secs(60))
                .await
                .unwrap();
            let takes = stores.iter().map(|store| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move { store.take(&key).await.unwrap() })
            });
            let taken = futures::future::join_all(takes).await;
            let got = taken
                .into_iter()
                .filter(|t| matches!(t, Ok(Some(_))))
                .count();
            assert_eq!(got, 1, "key {key}");
        }
    });
}

#[test]
fn an_unreachable_redis_or_a_wrong_password_is_an_error_naming_it_at_once() {
    let redis = Redis::start();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    block(async {
        let started = Instant::now();
        let url = format!("redis://127.0.0.1:{closed}/0");
        let error = RedisStore::connect(&RedisOptions::new(&url))
            .await
            .err()
            .unwrap();
        let said = error.to_string();
        assert!(said.contains(&format!("Redis at {url}")), "{said}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let wrong = RedisOptions::new(redis.url()).password("not-the-password");
        let said = RedisStore::connect(&wrong).await.err().unwrap().to_string();
        assert!(
            said.contains("Redis at redis://127.0.0.1") && !said.contains("not-the-password"),
            "{said}"
        );
        let none = RedisStore::connect(&RedisOptions::new(redis.url()))
            .await
            .err()
            .unwrap();
        assert!(none.to_string().contains("Redis at"), "{none}");
    });
}

#[test]
fn a_lost_redis_is_an_error_within_the_timeout_and_the_store_reconnects_when_it_is_back() {
    let mut redis = Redis::start();
    let options = options(&redis).timeout(Duration::from_millis(500));
    // The store's connection lives on the runtime it was made on.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(RedisStore::connect(&options)).unwrap();
    runtime
        .block_on(store.put("k", b"v".to_vec(), Duration::from_secs(60)))
        .unwrap();
    redis.kill();
    let started = Instant::now();
    let lost = runtime.block_on(store.get("k"));
    assert!(lost.is_err(), "{lost:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    redis.restart();
    // Back, and empty: what it held is gone, and the store answers again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match runtime.block_on(store.get("k")) {
            Ok(value) => {
                assert_eq!(value, None, "restarted empty");
                break;
            }
            Err(error) => assert!(Instant::now() < deadline, "not back: {error}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    runtime
        .block_on(store.put("k2", b"v".to_vec(), Duration::from_secs(60)))
        .unwrap();
}
