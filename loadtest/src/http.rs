//! A small JSON client for the gateway's REST API.

use anyhow::Context;
use serde_json::Value;

/// A client with an optional API key.
#[derive(Clone)]
pub struct Api {
    /// Base URL, e.g. `http://127.0.0.1:8080`.
    pub base: String,
    key: Option<String>,
    http: reqwest::Client,
}

impl Api {
    /// A client for `base` with `key`.
    pub fn new(base: &str, key: Option<&str>) -> Api {
        Api {
            base: base.trim_end_matches('/').to_string(),
            key: key.map(String::from),
            http: reqwest::Client::new(),
        }
    }

    /// The same server with another key.
    pub fn with_key(&self, key: &str) -> Api {
        Api {
            base: self.base.clone(),
            key: Some(key.to_string()),
            http: self.http.clone(),
        }
    }

    /// The API key, if any.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Sends a request; answers (status, JSON body or Null).
    ///
    /// # Errors
    /// The request could not be sent.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        idem: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        if let Some(i) = idem {
            r = r.header("Idempotency-Key", i);
        }
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await.with_context(|| path.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// GET that must answer 200.
    ///
    /// # Errors
    /// Another status.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let (s, v) = self.call(reqwest::Method::GET, path, None, None).await?;
        anyhow::ensure!(s == 200, "GET {path}: {s} {v}");
        Ok(v)
    }

    /// POST that must answer 2xx.
    ///
    /// # Errors
    /// Another status.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        idem: Option<&str>,
    ) -> anyhow::Result<Value> {
        let (s, v) = self
            .call(reqwest::Method::POST, path, Some(body), idem)
            .await?;
        anyhow::ensure!((200..300).contains(&s), "POST {path}: {s} {v}");
        Ok(v)
    }

    /// Raw GET bytes (reports in CSV/XLSX).
    ///
    /// # Errors
    /// The request failed or answered non-200.
    pub async fn get_bytes(&self, path: &str) -> anyhow::Result<Vec<u8>> {
        let mut r = self.http.get(format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        let resp = r.send().await?;
        anyhow::ensure!(resp.status() == 200, "GET {path}: {}", resp.status());
        Ok(resp.bytes().await?.to_vec())
    }
}
