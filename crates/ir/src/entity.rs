//! Ids in errors, names at the edge (cranelift's `AnyEntity` pattern).
//!
//! An error about a graph or a plan of it holds the ids of the tensors and nodes it is about
//! ([`AnyEntity`]), never their names, so a tool can point at them (the JSON of `memplan
//! check`, the HTML picture). Its message is written once, by [`GraphError::fmt_with`],
//! naming each entity through [`Names`]; [`GraphError::with_graph`] is the one adapter that
//! renders it with a graph: each entity by its name where the graph has it, else by its id
//! (`t12`, `n3`: an id a plan file names may be out of range). Without a graph the message
//! names the ids.

use std::fmt;
use std::sync::Arc;

use crate::graph::Graph;
use crate::ids::{NodeId, TensorId};

/// A tensor or a node of a graph: what an error points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum AnyEntity {
    /// A tensor.
    Tensor(TensorId),
    /// A node.
    Node(NodeId),
}

impl From<TensorId> for AnyEntity {
    fn from(t: TensorId) -> AnyEntity {
        AnyEntity::Tensor(t)
    }
}

impl From<NodeId> for AnyEntity {
    fn from(n: NodeId) -> AnyEntity {
        AnyEntity::Node(n)
    }
}

impl fmt::Display for AnyEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyEntity::Tensor(t) => t.fmt(f),
            AnyEntity::Node(n) => n.fmt(f),
        }
    }
}

/// How a message names entities: by name in a graph, or by id when there is none.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    graph: Option<&'a Graph>,
}

impl<'a> Names<'a> {
    /// Entities named by `graph`.
    pub fn of(graph: &'a Graph) -> Names<'a> {
        Names { graph: Some(graph) }
    }

    /// Entities named by their ids.
    pub fn ids() -> Names<'a> {
        Names { graph: None }
    }

    /// The graph names come from, if any.
    pub fn graph(self) -> Option<&'a Graph> {
        self.graph
    }

    /// `entity`, written by name where the graph has it, else by id.
    pub fn name(self, entity: impl Into<AnyEntity>) -> EntityName<'a> {
        EntityName {
            graph: self.graph,
            entity: entity.into(),
        }
    }

    /// The names of body `attr` of node `node` (its own tensors and nodes): by id when the
    /// graph, the node or the body is not there.
    pub fn body(self, node: NodeId, attr: &str) -> Names<'a> {
        let graph = self
            .graph
            .and_then(|g| g.nodes().get(node))
            .and_then(|n| n.bodies.iter().find(|b| b.attr == attr))
            .map(|b| &b.graph);
        Names { graph }
    }
}

/// An entity as a message writes it (see [`Names::name`]).
#[derive(Clone, Copy, Debug)]
pub struct EntityName<'a> {
    graph: Option<&'a Graph>,
    entity: AnyEntity,
}

impl fmt::Display for EntityName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.graph.and_then(|g| match self.entity {
            AnyEntity::Tensor(t) => g.tensors().get(t).map(|x| x.name.as_str()),
            AnyEntity::Node(n) => g.nodes().get(n).map(|x| x.name.as_str()),
        });
        match name {
            Some(name) => f.write_str(name),
            None => self.entity.fmt(f),
        }
    }
}

/// An error whose message names tensors and nodes of a graph by id.
pub trait GraphError {
    /// Writes the message, naming each entity through `names`.
    fn fmt_with(&self, names: Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result;

    /// The entities the error is about, of the graph it was found in, in the order the
    /// message names them, each once.
    fn entities(&self) -> Vec<AnyEntity>;

    /// The message with `graph`'s names: the one adapter every caller renders through.
    fn with_graph<'a>(&'a self, graph: &'a Graph) -> WithGraph<'a, Self> {
        WithGraph {
            error: self,
            names: Names::of(graph),
        }
    }
}

/// An error rendered with a graph's names (see [`GraphError::with_graph`]).
#[derive(Debug)]
pub struct WithGraph<'a, E: ?Sized> {
    error: &'a E,
    names: Names<'a>,
}

impl<E: GraphError + ?Sized> fmt::Display for WithGraph<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt_with(self.names, f)
    }
}

/// The graph an error was found in, carried by the error when its caller may not hold that
/// graph (a graph built, read or derived inside the call that failed), so that the error
/// renders its entities with their own names. Shared, so an error stays cheap to clone; two
/// are equal when they are the same graph or write the same JSON.
#[derive(Clone, Debug)]
pub struct ErrorGraph(pub Arc<Graph>);

impl ErrorGraph {
    /// `graph`, to be carried by an error.
    pub fn new(graph: Graph) -> ErrorGraph {
        ErrorGraph(Arc::new(graph))
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.0
    }
}

impl PartialEq for ErrorGraph {
    fn eq(&self, other: &ErrorGraph) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_json() == other.0.to_json()
    }
}

impl Eq for ErrorGraph {}

/// Collects entities in first-named order, each once (for [`GraphError::entities`]).
#[derive(Debug, Default)]
pub struct Entities(Vec<AnyEntity>);

impl Entities {
    /// Adds `entity` unless it is there already.
    pub fn add(&mut self, entity: impl Into<AnyEntity>) -> &mut Entities {
        let e = entity.into();
        if !self.0.contains(&e) {
            self.0.push(e);
        }
        self
    }

    /// The entities.
    pub fn into_vec(self) -> Vec<AnyEntity> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder};

    #[test]
    fn names_where_the_graph_has_them_else_ids() {
        let mut g = GraphBuilder::new("g");
        let x = g.input("x", DType::F32, [4]);
        let y = g.op("Relu", &[x], DType::F32, [4]);
        g.mark_output(y);
        let graph = g.build().unwrap();
        let names = Names::of(&graph);
        assert_eq!(names.name(x).to_string(), "x");
        assert_eq!(
            names.name(NodeId(0)).to_string(),
            graph.nodes()[NodeId(0)].name
        );
        assert_eq!(names.name(TensorId(99)).to_string(), "t99");
        assert_eq!(Names::ids().name(x).to_string(), x.to_string());
        assert_eq!(
            names.body(NodeId(0), "then_branch").name(x).to_string(),
            x.to_string()
        );
    }
}
