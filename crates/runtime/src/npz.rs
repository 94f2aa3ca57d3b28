//! numpy's `.npz` archives: a zip file with one `.npy` member per array.
//!
//! `np.savez` writes members uncompressed ("stored"), `np.savez_compressed` deflates them; both
//! are read here (deflate through `miniz_oxide`). [`write`] writes stored members, as `np.savez`
//! does, with the CRC-32 that Python's `zipfile` checks. Member names lose their `.npy` suffix on
//! reading and get it on writing, so `np.load(f)["x"]` and `read(..)["x"]` name the same array.
//!
//! Only what numpy produces is read: a single-disk archive, stored or deflated members, and the
//! zip64 extra field that numpy writes for every member (`force_zip64=True`). Anything else is a
//! [`NpzError`], never a panic; sizes are checked against the archive before any allocation.

use indexmap::IndexMap;

use crate::host::HostArray;
use crate::npy::{self, NpyError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NpzError {
    #[error("not an .npz (zip) archive: {0}")]
    Format(String),
    #[error("member '{name}': {message}")]
    Member { name: String, message: String },
    #[error("member '{name}': {source}")]
    Npy { name: String, source: NpyError },
}

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const END_SIG: u32 = 0x0605_4b50;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The CRC-32 (IEEE, reflected, as zip uses it) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    let mut crc = !0u32;
    for &byte in data {
        crc = table[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The members of an archive as raw bytes, in archive order, names without `.npy`.
pub fn read_members(bytes: &[u8]) -> Result<IndexMap<String, Vec<u8>>, NpzError> {
    let fmt = |m: &str| NpzError::Format(m.to_string());
    // End of central directory: 22 bytes plus a comment of at most 65535 bytes.
    let min = bytes.len().saturating_sub(22 + 65535);
    let end = (min..=bytes.len().saturating_sub(22))
        .rev()
        .find(|&i| u32_at(bytes, i) == Some(END_SIG))
        .ok_or_else(|| fmt("no end-of-central-directory record"))?;
    let count = u16_at(bytes, end + 10).ok_or_else(|| fmt("truncated end record"))? as usize;
    let mut at = u32_at(bytes, end + 16).ok_or_else(|| fmt("truncated end record"))? as usize;
    let mut members = IndexMap::new();
    for _ in 0..count {
        if u32_at(bytes, at) != Some(CENTRAL_SIG) {
            return Err(fmt("bad central directory entry"));
        }
        let get16 = |o| u16_at(bytes, at + o).ok_or_else(|| fmt("truncated central entry"));
        let get32 = |o| u32_at(bytes, at + o).ok_or_else(|| fmt("truncated central entry"));
        let method = get16(10)?;
        let crc = get32(16)?;
        let mut csize = get32(20)? as u64;
        let mut usize_ = get32(24)? as u64;
        let name_len = get16(28)? as usize;
        let extra_len = get16(30)? as usize;
        let comment_len = get16(32)? as usize;
        let mut offset = get32(42)? as u64;
        let name_bytes = bytes
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| fmt("truncated member name"))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = bytes
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(|| fmt("truncated extra field"))?;
        // The zip64 extra field holds, in order, whichever of the sizes and the offset were
        // saturated in the fixed fields.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = u16_at(extra, e).unwrap_or(0);
            let len = u16_at(extra, e + 2).unwrap_or(0) as usize;
            if id == 1 {
                let mut f = e + 4;
                for field in [&mut usize_, &mut csize, &mut offset] {
                    if *field == 0xFFFF_FFFF {
                        *field = u64_at(extra, f).ok_or_else(|| fmt("truncated zip64 field"))?;
                        f += 8;
                    }
                }
            }
            e += 4 + len;
        }
        at += 46 + name_len + extra_len + comment_len;

        let member_err = |message: String| NpzError::Member {
            name: name.clone(),
            message,
        };
        let lo = offset as usize;
        if u32_at(bytes, lo) != Some(LOCAL_SIG) {
            return Err(member_err("bad local header".into()));
        }
        let lname = u16_at(bytes, lo + 26).unwrap_or(0) as usize;
        let lextra = u16_at(bytes, lo + 28).unwrap_or(0) as usize;
        let start = lo + 30 + lname + lextra;
        let data = usize::try_from(csize)
            .ok()
            .and_then(|c| bytes.get(start..start.checked_add(c)?))
            .ok_or_else(|| member_err("data runs past the end of the archive".into()))?;
        let out = match method {
            0 => data.to_vec(),
            8 => {
                // The uncompressed size is known; refuse absurd claims before inflating.
                if usize_
                    > (data.len() as u64)
                        .saturating_mul(1032)
                        .saturating_add(1 << 20)
                {
                    return Err(member_err(format!(
                        "uncompressed size {usize_} is implausible"
                    )));
                }
                miniz_oxide::inflate::decompress_to_vec_with_limit(data, usize_ as usize)
                    .map_err(|e| member_err(format!("deflate: {e:?}")))?
            }
            m => {
                return Err(member_err(format!(
                    "compression method {m} (only stored and deflate)"
                )))
            }
        };
        if out.len() as u64 != usize_ {
            return Err(member_err(format!(
                "{} bytes after decompression, the directory says {usize_}",
                out.len()
            )));
        }
        if crc32(&out) != crc {
            return Err(member_err("CRC-32 mismatch".into()));
        }
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        members.insert(key, out);
    }
    Ok(members)
}

/// Every member of an `.npz` as an array (element types as numpy names them).
pub fn read(bytes: &[u8]) -> Result<IndexMap<String, HostArray>, NpzError> {
    read_members(bytes)?
        .into_iter()
        .map(|(name, data)| match npy::read(&data, None) {
            Ok(a) => Ok((name, a)),
            Err(source) => Err(NpzError::Npy { name, source }),
        })
        .collect()
}

/// An `.npz` with one stored `.npy` member per array, in the given order.
pub fn write<'a>(arrays: impl IntoIterator<Item = (&'a str, &'a HostArray)>) -> Vec<u8> {
    let members: Vec<(String, Vec<u8>)> = arrays
        .into_iter()
        .map(|(name, a)| (format!("{name}.npy"), npy::write(a)))
        .collect();
    write_members(&members)
}

/// A zip of stored members (names used as given). Members must each be below 4 GiB.
pub fn write_members(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let size = data.len() as u32;
        let header = |out: &mut Vec<u8>, sig: u32| {
            out.extend_from_slice(&sig.to_le_bytes());
            if sig == CENTRAL_SIG {
                out.extend_from_slice(&20u16.to_le_bytes()); // version made by
            }
            out.extend_from_slice(&20u16.to_le_bytes()); // version needed
            out.extend_from_slice(&0u16.to_le_bytes()); // flags
            out.extend_from_slice(&0u16.to_le_bytes()); // stored
            out.extend_from_slice(&0u16.to_le_bytes()); // time
            out.extend_from_slice(&0x21u16.to_le_bytes()); // date: 1980-01-01
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes()); // extra length
        };
        header(&mut out, LOCAL_SIG);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        header(&mut central, CENTRAL_SIG);
        central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        central.extend_from_slice(&0u16.to_le_bytes()); // disk
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    let cd_size = central.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&END_SIG.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_of_known_string() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn round_trip() {
        let a = HostArray {
            ty: tessera_hlo::ElementType::S32,
            dims: vec![2],
            data: vec![1, 0, 0, 0, 2, 0, 0, 0],
        };
        let bytes = write([("x", &a), ("y.z", &a)]);
        let back = read(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back["x"], a);
        assert_eq!(back["y.z"], a);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(read(b"not a zip at all, just some bytes here").is_err());
        let a = HostArray {
            ty: tessera_hlo::ElementType::S32,
            dims: vec![1],
            data: vec![1, 0, 0, 0],
        };
        let mut bytes = write([("x", &a)]);
        let n = bytes.len();
        bytes[40] ^= 0xff; // inside the member data
        assert!(read(&bytes).is_err());
        bytes.truncate(n - 30);
        assert!(read(&bytes).is_err());
    }
}
