//! Replica groups: the device lists a collective's `replica_groups` stand for.
//!
//! XLA prints three spellings ([`ReplicaGroups`]): explicit lists, an iota (`[2,4]<=[4,2]T(1,0)`)
//! and a mesh with the axes the groups span (`mesh['x'=4,'y'=2] {'x'}`). The verifier, the
//! runtime harness (the CPU plugin reads only explicit lists) and the partitioner all need the
//! lists themselves; [`ReplicaGroups::groups`] is the one place that expands them.

use crate::attrs::{MeshReplicaGroups, ReplicaGroups};
use crate::shape::checked_product;
use crate::sharding::{Mesh, Sharding, TileAssignment};

/// Most devices an iota or mesh description may expand to (a bad description must not make us
/// allocate without bound).
pub const MAX_GROUP_DEVICES: i64 = 1 << 20;

/// Why replica groups could not be expanded into lists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaGroupsError {
    #[error("iota replica groups [{num_groups},{group_size}] do not fit reshape dimensions {reshape_dims:?} with permutation {perm:?}")]
    BadIota {
        num_groups: i64,
        group_size: i64,
        reshape_dims: Vec<i64>,
        perm: Vec<i64>,
    },
    #[error("replica groups of {0} devices are more than the {MAX_GROUP_DEVICES} supported")]
    TooMany(i64),
    #[error("mesh replica groups: {0}")]
    BadMesh(String),
}

impl ReplicaGroups {
    /// Explicit lists of device ids.
    pub fn explicit(groups: Vec<Vec<i64>>) -> ReplicaGroups {
        ReplicaGroups::Explicit(groups)
    }

    /// `[num_groups,group_size]<=[num_groups*group_size]`: consecutive devices form a group.
    pub fn iota(num_groups: i64, group_size: i64) -> ReplicaGroups {
        ReplicaGroups::Iota {
            num_groups,
            group_size,
            reshape_dims: vec![num_groups * group_size],
            transpose_perm: Vec::new(),
        }
    }

    /// `[num_groups,group_size]<=[reshape_dims]T(perm)`: the iota over the devices, reshaped and
    /// transposed, read row-major in groups of `group_size`.
    pub fn iota_transposed(
        num_groups: i64,
        group_size: i64,
        reshape_dims: &[i64],
        perm: &[i64],
    ) -> ReplicaGroups {
        ReplicaGroups::Iota {
            num_groups,
            group_size,
            reshape_dims: reshape_dims.to_vec(),
            transpose_perm: perm.to_vec(),
        }
    }

    /// `mesh[axes] {group_axes}`: devices that differ only along `group_axes` form a group.
    pub fn mesh(axes: &[(&str, i64)], group_axes: &[&str]) -> ReplicaGroups {
        ReplicaGroups::Mesh(MeshReplicaGroups {
            mesh: Mesh::iota(axes),
            group_axes: group_axes.iter().map(|a| format!("'{a}'")).collect(),
        })
    }

    /// The number of devices in each group, when the description says it without expanding
    /// (the first group of an explicit list).
    pub fn group_size(&self) -> Option<i64> {
        match self {
            ReplicaGroups::Explicit(g) => g.first().map(|g| g.len() as i64),
            ReplicaGroups::Iota { group_size, .. } => Some(*group_size),
            ReplicaGroups::Mesh(m) => {
                let mut n = 1i64;
                for a in &m.group_axes {
                    let (name, sub) = group_axis(a).ok()?;
                    let size = match sub {
                        Some((_, s)) => s,
                        None => m.mesh.axes.iter().find(|x| x.name == name)?.size,
                    };
                    n = n.checked_mul(size)?;
                }
                Some(n)
            }
        }
    }

    /// The groups as explicit lists of device ids.
    pub fn groups(&self) -> Result<Vec<Vec<i64>>, ReplicaGroupsError> {
        match self {
            ReplicaGroups::Explicit(groups) => Ok(groups.clone()),
            ReplicaGroups::Iota {
                num_groups,
                group_size,
                reshape_dims,
                transpose_perm,
            } => iota_groups(*num_groups, *group_size, reshape_dims, transpose_perm),
            ReplicaGroups::Mesh(m) => mesh_groups(m),
        }
    }
}

fn iota_groups(
    num_groups: i64,
    group_size: i64,
    reshape_dims: &[i64],
    perm: &[i64],
) -> Result<Vec<Vec<i64>>, ReplicaGroupsError> {
    let bad = || ReplicaGroupsError::BadIota {
        num_groups,
        group_size,
        reshape_dims: reshape_dims.to_vec(),
        perm: perm.to_vec(),
    };
    let n = num_groups.checked_mul(group_size).ok_or_else(bad)?;
    if num_groups < 1 || group_size < 1 {
        return Err(bad());
    }
    if n > MAX_GROUP_DEVICES {
        return Err(ReplicaGroupsError::TooMany(n));
    }
    let dims: Vec<i64> = if reshape_dims.is_empty() {
        vec![n]
    } else {
        reshape_dims.to_vec()
    };
    if dims.iter().any(|&d| d < 1) || checked_product(&dims) != Some(n) {
        return Err(bad());
    }
    if !perm.is_empty() {
        let mut seen = vec![false; dims.len()];
        if perm.len() != dims.len()
            || !perm.iter().all(|&p| {
                usize::try_from(p)
                    .ok()
                    .and_then(|p| seen.get_mut(p))
                    .is_some_and(|s| !std::mem::replace(s, true))
            })
        {
            return Err(bad());
        }
    }
    let ta = TileAssignment::Iota {
        dims: [num_groups, group_size].into_iter().collect(),
        reshape_dims: dims.iter().copied().collect(),
        transpose_perm: perm.iter().copied().collect(),
    };
    Ok(ta
        .devices()
        .chunks(group_size as usize)
        .map(<[i64]>::to_vec)
        .collect())
}

/// `'x'` or `'x':(pre)size` (a sub-axis: `size` devices of the axis, with `pre` before them).
fn group_axis(s: &str) -> Result<(String, Option<(i64, i64)>), ReplicaGroupsError> {
    let bad = || ReplicaGroupsError::BadMesh(format!("cannot read group axis `{s}`"));
    let t = s.trim();
    let (name, rest) = match t.strip_prefix('\'') {
        Some(q) => {
            let end = q.find('\'').ok_or_else(bad)?;
            (&q[..end], &q[end + 1..])
        }
        None => match t.find(':') {
            Some(i) => (&t[..i], &t[i..]),
            None => (t, ""),
        },
    };
    if rest.is_empty() {
        return Ok((name.to_string(), None));
    }
    let rest = rest.strip_prefix(":(").ok_or_else(bad)?;
    let (pre, size) = rest.split_once(')').ok_or_else(bad)?;
    Ok((
        name.to_string(),
        Some((
            pre.trim().parse().map_err(|_| bad())?,
            size.trim().parse().map_err(|_| bad())?,
        )),
    ))
}

/// Devices that differ only along the group axes of the mesh, one group per combination of the
/// other axes (row-major), each ordered row-major over the group axes as listed.
fn mesh_groups(m: &MeshReplicaGroups) -> Result<Vec<Vec<i64>>, ReplicaGroupsError> {
    let parsed: Vec<(String, Option<(i64, i64)>)> = m
        .group_axes
        .iter()
        .map(|a| group_axis(a))
        .collect::<Result<_, _>>()?;
    // Axes named by a sub-axis are split into (pre, size, rest).
    let mut fine: Vec<i64> = Vec::new();
    let mut group_dims: Vec<usize> = vec![usize::MAX; parsed.len()];
    for axis in &m.mesh.axes {
        let (name, size) = (&axis.name, &axis.size);
        if *size < 1 {
            return Err(ReplicaGroupsError::BadMesh(format!(
                "axis '{name}' has size {size}"
            )));
        }
        let uses: Vec<usize> = (0..parsed.len())
            .filter(|&i| parsed[i].0 == *name)
            .collect();
        match uses.as_slice() {
            [] => fine.push(*size),
            [i] => match parsed[*i].1 {
                None => {
                    group_dims[*i] = fine.len();
                    fine.push(*size);
                }
                Some((pre, sub)) => {
                    if pre <= 0 || sub <= 0 || size % (pre * sub) != 0 {
                        return Err(ReplicaGroupsError::BadMesh(format!(
                            "sub-axis ({pre}){sub} of '{name}'={size}"
                        )));
                    }
                    fine.push(pre);
                    group_dims[*i] = fine.len();
                    fine.push(sub);
                    fine.push(size / (pre * sub));
                }
            },
            _ => {
                return Err(ReplicaGroupsError::BadMesh(format!(
                    "axis '{name}' is named twice"
                )))
            }
        }
    }
    if let Some(i) = group_dims.iter().position(|&d| d == usize::MAX) {
        return Err(ReplicaGroupsError::BadMesh(format!(
            "group axis {} is not a mesh axis",
            m.group_axes[i]
        )));
    }
    let n = checked_product(&fine)
        .filter(|&n| n <= MAX_GROUP_DEVICES)
        .ok_or(ReplicaGroupsError::TooMany(i64::MAX))?;
    let devices = m.mesh.device_list();
    if devices.len() as i64 != n {
        return Err(ReplicaGroupsError::BadMesh(format!(
            "{} device ids for a mesh of {n}",
            devices.len()
        )));
    }
    let ta = TileAssignment::Explicit {
        dims: fine.iter().copied().collect(),
        devices,
    };
    Sharding::tiled(ta, false)
        .device_groups(&group_dims)
        .ok_or_else(|| ReplicaGroupsError::BadMesh("the group axes do not split the mesh".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_expands() {
        // [2,4]<=[8]: rows of the iota.
        assert_eq!(
            ReplicaGroups::iota(2, 4).groups().unwrap(),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        // [4,2]<=[2,4]T(1,0): columns.
        assert_eq!(
            ReplicaGroups::iota_transposed(4, 2, &[2, 4], &[1, 0])
                .groups()
                .unwrap(),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        // mesh['x'=2,'y'=4] {'y'}: rows; {'x'}: columns; {'y':(1)2}: pairs inside rows.
        let mesh = |axes: &[&str]| {
            ReplicaGroups::Mesh(MeshReplicaGroups {
                mesh: Mesh::iota(&[("x", 2), ("y", 4)]),
                group_axes: axes.iter().map(|s| s.to_string()).collect(),
            })
        };
        let cases: [(&[&str], Vec<Vec<i64>>); 4] = [
            (&["'y'"], vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]),
            (
                &["'x'"],
                vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]],
            ),
            (
                &["'y':(1)2"],
                vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]],
            ),
            (&["'x'", "'y'"], vec![(0..8).collect()]),
        ];
        for (axes, want) in cases {
            let g = mesh(axes);
            assert_eq!(g.groups().unwrap(), want, "{axes:?}");
            assert_eq!(g.group_size(), Some(want[0].len() as i64), "{axes:?}");
        }
        assert_eq!(
            ReplicaGroups::mesh(&[("a", 2), ("b", 2)], &["b"])
                .groups()
                .unwrap(),
            vec![vec![0, 1], vec![2, 3]]
        );
        assert!(matches!(
            mesh(&["'z'"]).groups(),
            Err(ReplicaGroupsError::BadMesh(_))
        ));
        let e = vec![vec![3, 1], vec![0, 2]];
        assert_eq!(ReplicaGroups::explicit(e.clone()).groups().unwrap(), e);
    }

    #[test]
    fn bad_descriptions_are_errors() {
        for g in [
            ReplicaGroups::iota_transposed(2, 4, &[3, 3], &[]),
            ReplicaGroups::iota_transposed(2, 4, &[2, 4], &[0, 0]),
            ReplicaGroups::iota_transposed(2, 4, &[2, 4], &[1]),
            ReplicaGroups::iota_transposed(0, 4, &[0], &[]),
            ReplicaGroups::iota_transposed(i64::MAX, 4, &[], &[]),
        ] {
            assert!(g.groups().is_err(), "{g:?}");
        }
        assert_eq!(
            ReplicaGroups::iota(1 << 20, 1 << 20).groups(),
            Err(ReplicaGroupsError::TooMany(1 << 40))
        );
    }
}
