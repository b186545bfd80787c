//! Connect's streaming envelope: one flag byte (0x01 compressed, 0x02 end of stream),
//! a 4-byte big-endian length, then the payload. Compression is gzip when the stream
//! declared it (`connect-content-encoding: gzip`); the end-of-stream frame carries JSON
//! `{"error": {"code", "message"}, "metadata": {...}}`.

use std::io::{Read, Write};

use bytes::{Buf, Bytes, BytesMut};
use serde_json::{Map, Value};

use crate::Error;

/// Flag bit: the payload is compressed with the stream's encoding.
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Flag bit: the last frame, carrying the trailers and any error.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Bytes before each payload.
pub const HEADER_LEN: usize = 5;
/// The default limit on one frame (before and after decompression).
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// One frame, its payload already decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The flags as sent (the compressed bit stays set after decompression).
    pub flags: u8,
    pub payload: Bytes,
}

impl Frame {
    /// Whether this is the stream's last frame.
    pub fn is_end_stream(&self) -> bool {
        self.flags & FLAG_END_STREAM != 0
    }

    /// The end-of-stream JSON, if this is the last frame.
    pub fn end_of_stream(&self) -> Option<Result<EndOfStream, Error>> {
        self.is_end_stream()
            .then(|| EndOfStream::parse(&self.payload))
    }
}

/// Splits a byte stream into frames; feed it chunks as they arrive.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    gzip: bool,
    max: usize,
    /// Bytes gunzipping may still produce in all (`None`: per frame only). A whole
    /// body has one: many small gzip frames must not each inflate to `max`.
    inflate_budget: Option<usize>,
}

impl FrameDecoder {
    /// `gzip`: the stream declared gzip, so compressed frames are gunzipped (a
    /// compressed frame on a stream that declared nothing is an error).
    pub fn new(gzip: bool) -> FrameDecoder {
        FrameDecoder::with_limit(gzip, DEFAULT_MAX_FRAME)
    }

    /// As [`FrameDecoder::new`], refusing frames above `max` bytes.
    pub fn with_limit(gzip: bool, max: usize) -> FrameDecoder {
        FrameDecoder {
            buf: BytesMut::new(),
            gzip,
            max,
            inflate_budget: None,
        }
    }

    /// Refuse a stream whose compressed frames inflate to more than `budget` bytes
    /// in all (for a whole body held in memory; a relayed stream has no total).
    pub fn with_inflate_budget(mut self, budget: usize) -> FrameDecoder {
        self.inflate_budget = Some(budget);
        self
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > self.max {
            return Err(Error::FrameTooLarge {
                len,
                limit: self.max,
            });
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let raw = self.buf.split_to(len).freeze();
        let payload = if flags & FLAG_COMPRESSED != 0 {
            if !self.gzip {
                return Err(Error::Compression(
                    "a compressed frame on a stream that declared no encoding".into(),
                ));
            }
            let limit = self.inflate_budget.map_or(self.max, |b| b.min(self.max));
            let inflated = gunzip(&raw, limit)?;
            if let Some(budget) = &mut self.inflate_budget {
                *budget -= inflated.len();
            }
            inflated.into()
        } else {
            raw
        };
        Ok(Some(Frame { flags, payload }))
    }

    /// The stream ended: an error if it stopped inside a frame.
    pub fn finish(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::Truncated("Connect frame"))
        }
    }
}

/// Every frame of a complete body. Compressed frames may inflate to
/// [`DEFAULT_MAX_FRAME`] bytes in all, not each.
pub fn decode_all(body: &[u8], gzip: bool) -> Result<Vec<Frame>, Error> {
    let mut decoder = FrameDecoder::new(gzip).with_inflate_budget(DEFAULT_MAX_FRAME);
    decoder.push(body);
    let mut frames = Vec::new();
    while let Some(frame) = decoder.next_frame()? {
        frames.push(frame);
    }
    decoder.finish()?;
    Ok(frames)
}

/// Gunzip `data`, refusing output above `max` bytes.
pub fn gunzip(data: &[u8], max: usize) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::Compression(e.to_string()))?;
    if out.len() > max {
        return Err(Error::FrameTooLarge {
            len: out.len(),
            limit: max,
        });
    }
    Ok(out)
}

/// Gzip `data`.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(data);
    encoder.finish().unwrap_or_default()
}

/// One frame's bytes: `flags` (without the compressed bit, which `compress` sets) and
/// the payload, gzipped when `compress`.
pub fn encode_frame(flags: u8, payload: &[u8], compress: bool) -> Vec<u8> {
    let (flags, body) = if compress {
        (flags | FLAG_COMPRESSED, gzip(payload))
    } else {
        (flags & !FLAG_COMPRESSED, payload.to_vec())
    };
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// A data frame carrying `message`.
pub fn message_frame(message: &[u8]) -> Vec<u8> {
    encode_frame(0, message, false)
}

/// The error half of an end-of-stream frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndOfStreamError {
    /// A Connect code: `internal`, `unavailable`, `canceled`, ...
    pub code: String,
    pub message: String,
}

/// The end-of-stream frame's JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndOfStream {
    pub error: Option<EndOfStreamError>,
    /// Trailers: name → values.
    pub metadata: Map<String, Value>,
}

impl EndOfStream {
    /// Read the end-of-stream payload (an empty payload is a clean end).
    pub fn parse(payload: &[u8]) -> Result<EndOfStream, Error> {
        if payload.is_empty() {
            return Ok(EndOfStream::default());
        }
        let value: Value =
            serde_json::from_slice(payload).map_err(|e| Error::EndOfStream(e.to_string()))?;
        let Value::Object(mut map) = value else {
            return Err(Error::EndOfStream("not a JSON object".into()));
        };
        let error = match map.remove("error") {
            None | Some(Value::Null) => None,
            Some(Value::Object(error)) => Some(EndOfStreamError {
                code: error
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned(),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            Some(_) => return Err(Error::EndOfStream("`error` is not an object".into())),
        };
        let metadata = match map.remove("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(metadata)) => metadata,
            Some(_) => return Err(Error::EndOfStream("`metadata` is not an object".into())),
        };
        Ok(EndOfStream { error, metadata })
    }

    /// The end-of-stream frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut map = Map::new();
        if let Some(error) = &self.error {
            map.insert(
                "error".into(),
                serde_json::json!({"code": error.code, "message": error.message}),
            );
        }
        if !self.metadata.is_empty() {
            map.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        let payload = serde_json::to_vec(&Value::Object(map)).unwrap_or_else(|_| b"{}".to_vec());
        encode_frame(FLAG_END_STREAM, &payload, false)
    }

    /// A clean end.
    pub fn ok() -> EndOfStream {
        EndOfStream::default()
    }

    /// An end carrying an error.
    pub fn error(code: &str, message: impl Into<String>) -> EndOfStream {
        EndOfStream {
            error: Some(EndOfStreamError {
                code: code.to_owned(),
                message: message.into(),
            }),
            metadata: Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_reassemble() {
        let mut wire = message_frame(b"hello");
        wire.extend(encode_frame(0, b"zipped payload zipped payload", true));
        wire.extend(EndOfStream::ok().encode());
        for cut in 0..wire.len() {
            let mut decoder = FrameDecoder::new(true);
            let mut frames = Vec::new();
            for chunk in [&wire[..cut], &wire[cut..]] {
                decoder.push(chunk);
                while let Some(frame) = decoder.next_frame().expect("valid") {
                    frames.push(frame);
                }
            }
            decoder.finish().expect("nothing left over");
            assert_eq!(frames.len(), 3, "cut at {cut}");
            assert_eq!(&frames[0].payload[..], b"hello");
            assert_eq!(&frames[1].payload[..], b"zipped payload zipped payload");
            assert_eq!(frames[1].flags & FLAG_COMPRESSED, FLAG_COMPRESSED);
            assert_eq!(
                frames[2].end_of_stream().expect("last").expect("json"),
                EndOfStream::ok()
            );
        }
    }

    #[test]
    fn end_of_stream_errors_round_trip() {
        let mut end = EndOfStream::error("resource_exhausted", "slow down");
        end.metadata
            .insert("x-trace".into(), serde_json::json!(["abc"]));
        let frames = decode_all(&end.encode(), false).expect("frames");
        assert_eq!(frames.len(), 1);
        let parsed = frames[0].end_of_stream().expect("end").expect("json");
        assert_eq!(parsed, end);
        assert_eq!(
            parsed.error.map(|e| e.code),
            Some("resource_exhausted".to_owned())
        );
    }

    #[test]
    fn malformed_frames_are_clear_errors() {
        // Cut inside the payload.
        let wire = message_frame(b"hello");
        assert_eq!(
            decode_all(&wire[..7], false),
            Err(Error::Truncated("Connect frame"))
        );
        // Compressed without a declared encoding.
        let zipped = encode_frame(0, b"x", true);
        assert!(matches!(
            decode_all(&zipped, false),
            Err(Error::Compression(_))
        ));
        // Compressed flag on bytes that are not gzip.
        let mut bogus = message_frame(b"not gzip");
        bogus[0] = FLAG_COMPRESSED;
        assert!(matches!(
            decode_all(&bogus, true),
            Err(Error::Compression(_))
        ));
        // Over the limit, refused from the header alone.
        let mut decoder = FrameDecoder::with_limit(false, 4);
        decoder.push(&[0, 0, 0, 0, 9]);
        assert_eq!(
            decoder.next_frame(),
            Err(Error::FrameTooLarge { len: 9, limit: 4 })
        );
        // A gzip bomb is cut at the limit.
        let big = encode_frame(0, &vec![0u8; 1 << 16], true);
        let mut decoder = FrameDecoder::with_limit(true, 1024);
        decoder.push(&big);
        assert!(matches!(
            decoder.next_frame(),
            Err(Error::FrameTooLarge { .. })
        ));
        // Many small bombs, each under the frame limit, are cut by the body's total.
        let one = encode_frame(0, &vec![0u8; 600], true);
        let mut decoder = FrameDecoder::with_limit(true, 1024).with_inflate_budget(1500);
        decoder.push(&one.repeat(3));
        assert!(decoder.next_frame().is_ok_and(|f| f.is_some()));
        assert!(decoder.next_frame().is_ok_and(|f| f.is_some()));
        assert!(matches!(
            decoder.next_frame(),
            Err(Error::FrameTooLarge { limit: 300, .. })
        ));
        let bomb = encode_frame(0, &vec![0u8; DEFAULT_MAX_FRAME - 64], true);
        assert!(bomb.len() < DEFAULT_MAX_FRAME / 100, "a small frame");
        assert!(matches!(
            decode_all(&bomb.repeat(2), true),
            Err(Error::FrameTooLarge { .. })
        ));
        // End-of-stream JSON that is not JSON.
        let bad_end = encode_frame(FLAG_END_STREAM, b"{oops", false);
        let frames = decode_all(&bad_end, false).expect("framing is fine");
        assert!(matches!(
            frames[0].end_of_stream(),
            Some(Err(Error::EndOfStream(_)))
        ));
    }
}
