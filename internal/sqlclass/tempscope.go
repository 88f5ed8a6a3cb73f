package sqlclass

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Temporary objects and replicated DDL. tashkent replicates DDL as its
// text, in the global order (Postgres-R(SI) §5: "for SQL DDL statements
// the writeset simply contains the query text"; its footnote 3: some DDL
// is executed only at the replica it is submitted to, some disallowed).
// The other replicas run it in their appliers' sessions, which have none
// of this session's temporary objects: DDL on a temporary object fails
// there, or creates it in the applier's own session (where the next
// session's object of the same name then fails), and a failed replay
// stops that replica's applier for good. So DDL that acts only on
// temporary objects stays on its replica, and DDL that would make a
// permanent object out of, or depend on, a temporary one is refused.
//
// A TempScope is what the parse tree says: the objects the statement
// changes (its targets) and the other objects it names (its references).
// The text settles a name qualified with pg_temp, or an object created
// TEMP; the rest the proxy asks the session's catalog about (NeedsCatalog),
// because PostgreSQL searches the temporary schema first for relations and
// types (a temporary table shadows a permanent one), and a statistics
// object is temporary when its table is. For functions, operators,
// collations and the other objects in schemas, PostgreSQL never searches
// the temporary schema (namespace.c, "do not look in temp namespace"), so
// a name without pg_temp is never temporary, except where an object is
// created: a session whose search_path starts with pg_temp creates
// unqualified objects there.

// NameClass says where PostgreSQL looks for a name, and so whether the
// session's catalog must be asked about it.
type NameClass int

const (
	// OtherName is a function, operator, collation, text search object,
	// ...: temporary only when qualified with pg_temp.
	OtherName NameClass = iota
	// RelationName is a table, view, sequence or index.
	RelationName
	// TypeName is a type or domain.
	TypeName
	// StatisticsName is an extended statistics object: temporary when its
	// schema is, or its table.
	StatisticsName
	// RelationText is a relation named in a string, as regclass input
	// reads it ('seq'::regclass, nextval('seq')): Name is the string.
	RelationText
)

// ObjectName is one object a DDL statement names.
type ObjectName struct {
	Class  NameClass
	Schema string // "" when the statement gives none
	Name   string
	// Created: the statement creates the object (its schema is the
	// session's creation schema when Schema is "").
	Created bool
	// DeclaredTemp: CREATE TEMP ... or pg_temp.name.
	DeclaredTemp bool
}

// TextTemp is what the text says: temp, and whether that is known.
func (o ObjectName) TextTemp() (temp, known bool) {
	switch {
	case o.DeclaredTemp || isTempSchema(o.Schema):
		return true, true
	case o.Created:
		return false, o.Schema != ""
	case o.Class == StatisticsName || o.Class == RelationText:
		return false, false // public.s may be the statistics of a temporary table
	case o.Schema != "":
		return false, true
	}
	return false, o.Class == OtherName
}

// NeedsCatalog reports whether the text leaves the name open.
func (o ObjectName) NeedsCatalog() bool {
	_, known := o.TextTemp()
	return !known
}

// TempScope is a DDL statement's targets and references.
type TempScope struct {
	Targets    []ObjectName
	References []ObjectName
	// TempIfReferencing: PostgreSQL makes the created view temporary when
	// its query names a temporary relation ("view will be a temporary
	// view").
	TempIfReferencing bool
}

// Verdict is what becomes of a DDL statement.
type Verdict int

const (
	// Replicate: no temporary object involved.
	Replicate Verdict = iota
	// StayLocal: it changes temporary objects only.
	StayLocal
	// RefuseMixed: it changes temporary and permanent objects at once.
	RefuseMixed
	// RefuseTempReference: it changes permanent objects (or global
	// ones, a cast) in a way that names a temporary object.
	RefuseTempReference
)

// Verdict judges the statement, with isTemp answering for every name
// (the text's answer where known; see NeedsCatalog).
func (sc *TempScope) Verdict(isTemp func(ObjectName) bool) Verdict {
	if sc == nil {
		return Replicate
	}
	temp, permanent := 0, 0
	for _, o := range sc.Targets {
		if isTemp(o) {
			temp++
		} else {
			permanent++
		}
	}
	if temp > 0 && permanent > 0 {
		return RefuseMixed
	}
	if temp > 0 {
		return StayLocal
	}
	for _, o := range sc.References {
		if isTemp(o) {
			if sc.TempIfReferencing && o.Class == RelationName {
				return StayLocal
			}
			return RefuseTempReference
		}
	}
	return Replicate
}

// TextVerdict judges the statement from its text alone; known is false
// when some name needs the catalog.
func (sc *TempScope) TextVerdict() (v Verdict, known bool) {
	known = true
	v = sc.Verdict(func(o ObjectName) bool {
		temp, k := o.TextTemp()
		known = known && k
		return temp
	})
	if !known && v == StayLocal && sc.allTargetsKnownTemp() {
		known = true // temporary targets settle it, whatever the references are
	}
	return v, known
}

func (sc *TempScope) allTargetsKnownTemp() bool {
	for _, o := range sc.Targets {
		if temp, known := o.TextTemp(); !temp || !known {
			return false
		}
	}
	return len(sc.Targets) > 0
}

// CatalogNames are the names to ask the catalog about: the targets', and
// the references' unless the targets are temporary by their text.
func (sc *TempScope) CatalogNames() []ObjectName {
	if sc == nil || sc.allTargetsKnownTemp() {
		return nil
	}
	var names []ObjectName
	for _, o := range append(append([]ObjectName(nil), sc.Targets...), sc.References...) {
		if o.NeedsCatalog() {
			names = append(names, o)
		}
	}
	return names
}

// tempScope builds the scope of a DDL statement.
func tempScope(n *pg_query.Node) *TempScope {
	sc := &TempScope{}
	skip := map[proto.Message]bool{}
	for _, t := range ddlTargets(n, sc) {
		sc.Targets = append(sc.Targets, t.name)
		if t.node != nil {
			skip[t.node] = true
		}
	}
	sc.References = references(n, skip)
	return sc
}

// target is a target's name and the node that names it (left out of the
// references).
type target struct {
	name ObjectName
	node proto.Message
}

func rangeVarTarget(r *pg_query.RangeVar, class NameClass, created bool) []target {
	if r == nil {
		return nil
	}
	return []target{{ObjectName{Class: class, Schema: r.Schemaname, Name: r.Relname, Created: created,
		DeclaredTemp: r.Relpersistence == "t"}, r}}
}

// ddlTargets lists the objects a DDL statement creates, changes or drops.
func ddlTargets(n *pg_query.Node, sc *TempScope) []target {
	switch s := n.Node.(type) {
	case *pg_query.Node_CreateStmt:
		return rangeVarTarget(s.CreateStmt.Relation, RelationName, true)
	case *pg_query.Node_CreateForeignTableStmt:
		return rangeVarTarget(s.CreateForeignTableStmt.GetBaseStmt().GetRelation(), RelationName, true)
	case *pg_query.Node_CreateTableAsStmt:
		return rangeVarTarget(s.CreateTableAsStmt.GetInto().GetRel(), RelationName, true)
	case *pg_query.Node_SelectStmt:
		return rangeVarTarget(s.SelectStmt.GetIntoClause().GetRel(), RelationName, true)
	case *pg_query.Node_ViewStmt:
		sc.TempIfReferencing = true
		return rangeVarTarget(s.ViewStmt.View, RelationName, true)
	case *pg_query.Node_CreateSeqStmt:
		return rangeVarTarget(s.CreateSeqStmt.Sequence, RelationName, true)
	case *pg_query.Node_AlterSeqStmt:
		return rangeVarTarget(s.AlterSeqStmt.Sequence, RelationName, false)
	case *pg_query.Node_IndexStmt: // an index lives with its table
		return rangeVarTarget(s.IndexStmt.Relation, RelationName, false)
	case *pg_query.Node_AlterTableStmt:
		class := RelationName
		if s.AlterTableStmt.Objtype == pg_query.ObjectType_OBJECT_TYPE { // ALTER TYPE ... ADD ATTRIBUTE
			class = TypeName
		}
		return rangeVarTarget(s.AlterTableStmt.Relation, class, false)
	case *pg_query.Node_RefreshMatViewStmt:
		return rangeVarTarget(s.RefreshMatViewStmt.Relation, RelationName, false)
	case *pg_query.Node_CreateTrigStmt:
		return rangeVarTarget(s.CreateTrigStmt.Relation, RelationName, false)
	case *pg_query.Node_RuleStmt:
		return rangeVarTarget(s.RuleStmt.Relation, RelationName, false)
	case *pg_query.Node_CreatePolicyStmt:
		return rangeVarTarget(s.CreatePolicyStmt.Table, RelationName, false)
	case *pg_query.Node_AlterPolicyStmt:
		return rangeVarTarget(s.AlterPolicyStmt.Table, RelationName, false)
	case *pg_query.Node_CompositeTypeStmt:
		return rangeVarTarget(s.CompositeTypeStmt.Typevar, TypeName, true)
	case *pg_query.Node_CreateStatsStmt:
		return statisticsTargets(s.CreateStatsStmt)
	case *pg_query.Node_DropStmt:
		return objectTargets(s.DropStmt.RemoveType, s.DropStmt.Objects...)
	case *pg_query.Node_CommentStmt:
		return objectTargets(s.CommentStmt.Objtype, s.CommentStmt.Object)
	case *pg_query.Node_SecLabelStmt:
		return objectTargets(s.SecLabelStmt.Objtype, s.SecLabelStmt.Object)
	case *pg_query.Node_GrantStmt:
		return grantTargets(s.GrantStmt)
	case *pg_query.Node_AlterDefaultPrivilegesStmt:
		return defaultPrivilegeTargets(s.AlterDefaultPrivilegesStmt)
	}
	if t, ok := renameLikeTargets(n); ok {
		return t
	}
	return nameListTargets(n)
}

// renameLikeTargets: statements that name an existing object by a
// relation or an object node of some type.
func renameLikeTargets(n *pg_query.Node) ([]target, bool) {
	var objtype pg_query.ObjectType
	var rel *pg_query.RangeVar
	var obj *pg_query.Node
	switch s := n.Node.(type) {
	case *pg_query.Node_RenameStmt:
		objtype, rel, obj = s.RenameStmt.RenameType, s.RenameStmt.Relation, s.RenameStmt.Object
		if s.RenameStmt.RenameType == pg_query.ObjectType_OBJECT_ATTRIBUTE {
			objtype = pg_query.ObjectType_OBJECT_TYPE
		}
	case *pg_query.Node_AlterObjectSchemaStmt:
		objtype, rel, obj = s.AlterObjectSchemaStmt.ObjectType, s.AlterObjectSchemaStmt.Relation, s.AlterObjectSchemaStmt.Object
	case *pg_query.Node_AlterOwnerStmt:
		objtype, rel, obj = s.AlterOwnerStmt.ObjectType, s.AlterOwnerStmt.Relation, s.AlterOwnerStmt.Object
	case *pg_query.Node_AlterObjectDependsStmt:
		objtype, rel, obj = s.AlterObjectDependsStmt.ObjectType, s.AlterObjectDependsStmt.Relation, s.AlterObjectDependsStmt.Object
	default:
		return nil, false
	}
	if rel != nil {
		class := RelationName
		if objtype == pg_query.ObjectType_OBJECT_TYPE {
			class = TypeName
		}
		return rangeVarTarget(rel, class, false), true
	}
	return objectTargets(objtype, obj), true
}

// nameListTargets: statements that create or change one object named by
// a qualified name.
func nameListTargets(n *pg_query.Node) []target {
	var class NameClass
	var names []*pg_query.Node
	created := false
	switch s := n.Node.(type) {
	case *pg_query.Node_DefineStmt:
		names, created = s.DefineStmt.Defnames, true
		if s.DefineStmt.Kind == pg_query.ObjectType_OBJECT_TYPE {
			class = TypeName
		}
	case *pg_query.Node_CreateEnumStmt:
		class, names, created = TypeName, s.CreateEnumStmt.TypeName, true
	case *pg_query.Node_CreateRangeStmt:
		class, names, created = TypeName, s.CreateRangeStmt.TypeName, true
	case *pg_query.Node_CreateDomainStmt:
		class, names, created = TypeName, s.CreateDomainStmt.Domainname, true
	case *pg_query.Node_AlterEnumStmt:
		class, names = TypeName, s.AlterEnumStmt.TypeName
	case *pg_query.Node_AlterDomainStmt:
		class, names = TypeName, s.AlterDomainStmt.TypeName
	case *pg_query.Node_AlterTypeStmt:
		class, names = TypeName, s.AlterTypeStmt.TypeName
	case *pg_query.Node_AlterStatsStmt:
		class, names = StatisticsName, s.AlterStatsStmt.Defnames
	case *pg_query.Node_CreateFunctionStmt:
		names, created = s.CreateFunctionStmt.Funcname, true
	case *pg_query.Node_AlterFunctionStmt:
		return objectTargets(pg_query.ObjectType_OBJECT_FUNCTION, &pg_query.Node{Node: &pg_query.Node_ObjectWithArgs{ObjectWithArgs: s.AlterFunctionStmt.Func}})
	case *pg_query.Node_AlterOperatorStmt:
		return objectTargets(pg_query.ObjectType_OBJECT_OPERATOR, &pg_query.Node{Node: &pg_query.Node_ObjectWithArgs{ObjectWithArgs: s.AlterOperatorStmt.Opername}})
	case *pg_query.Node_CreateOpClassStmt:
		names, created = s.CreateOpClassStmt.Opclassname, true
	case *pg_query.Node_CreateOpFamilyStmt:
		names, created = s.CreateOpFamilyStmt.Opfamilyname, true
	case *pg_query.Node_AlterOpFamilyStmt:
		names = s.AlterOpFamilyStmt.Opfamilyname
	case *pg_query.Node_CreateConversionStmt:
		names, created = s.CreateConversionStmt.ConversionName, true
	case *pg_query.Node_AlterCollationStmt:
		names = s.AlterCollationStmt.Collname
	case *pg_query.Node_AlterTsdictionaryStmt:
		names = s.AlterTsdictionaryStmt.Dictname
	case *pg_query.Node_AlterTsconfigurationStmt:
		names = s.AlterTsconfigurationStmt.Cfgname
	default:
		return nil
	}
	o, ok := qualifiedName(class, names)
	if !ok {
		return nil
	}
	o.Created = created
	return []target{{o, nil}}
}

// statisticsTargets: a statistics object lives and dies with its table,
// so CREATE STATISTICS changes the table it is on. A name qualified with
// pg_temp is a target too (on a permanent table: mixed, refused).
func statisticsTargets(c *pg_query.CreateStatsStmt) []target {
	var ts []target
	for _, r := range c.Relations {
		ts = append(ts, rangeVarTarget(r.GetRangeVar(), RelationName, false)...)
	}
	if o, ok := qualifiedName(StatisticsName, c.Defnames); ok && isTempSchema(o.Schema) {
		ts = append(ts, target{o, nil})
	}
	return ts
}

// grantTargets: the objects of GRANT / REVOKE ON.
func grantTargets(g *pg_query.GrantStmt) []target {
	if g.Targtype == pg_query.GrantTargetType_ACL_TARGET_ALL_IN_SCHEMA {
		var ts []target
		for _, o := range g.Objects {
			ts = append(ts, target{ObjectName{Class: OtherName, Schema: o.GetString_().GetSval(), Name: "*"}, nil})
		}
		return ts
	}
	if g.Targtype != pg_query.GrantTargetType_ACL_TARGET_OBJECT {
		return nil
	}
	switch g.Objtype {
	case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_SEQUENCE:
		var ts []target
		for _, o := range g.Objects {
			ts = append(ts, rangeVarTarget(o.GetRangeVar(), RelationName, false)...)
		}
		return ts
	}
	return objectTargets(g.Objtype, g.Objects...)
}

// defaultPrivilegeTargets: ALTER DEFAULT PRIVILEGES IN SCHEMA changes
// the schemas it names.
func defaultPrivilegeTargets(a *pg_query.AlterDefaultPrivilegesStmt) []target {
	var ts []target
	for _, opt := range a.Options {
		if d := opt.GetDefElem(); d != nil && d.Defname == "schemas" {
			for _, it := range d.Arg.GetList().GetItems() {
				ts = append(ts, target{ObjectName{Class: OtherName, Schema: it.GetString_().GetSval(), Name: "*"}, nil})
			}
		}
	}
	return ts
}

// objectTargets names the objects of DROP, COMMENT ON, SECURITY LABEL,
// GRANT and ALTER ... of an object type: a trigger, rule, policy, column
// or constraint by its table, a domain constraint by its domain.
func objectTargets(objtype pg_query.ObjectType, objects ...*pg_query.Node) []target {
	class := classOf(objtype)
	var ts []target
	for _, obj := range objects {
		var o ObjectName
		ok := false
		switch x := obj.GetNode().(type) {
		case *pg_query.Node_String_: // a schema, an extension, a language, ...
			o, ok = ObjectName{Class: OtherName, Name: x.String_.Sval}, true
			if objtype == pg_query.ObjectType_OBJECT_SCHEMA {
				o = ObjectName{Class: OtherName, Schema: x.String_.Sval, Name: "*"}
			}
		case *pg_query.Node_TypeName:
			o, ok = qualifiedName(TypeName, x.TypeName.Names)
		case *pg_query.Node_ObjectWithArgs:
			o, ok = qualifiedName(class, x.ObjectWithArgs.Objname)
		case *pg_query.Node_List:
			items := x.List.Items
			switch objtype {
			case pg_query.ObjectType_OBJECT_COLUMN, pg_query.ObjectType_OBJECT_TABCONSTRAINT,
				pg_query.ObjectType_OBJECT_TRIGGER, pg_query.ObjectType_OBJECT_RULE, pg_query.ObjectType_OBJECT_POLICY:
				items = items[:max(len(items)-1, 0)] // the name within the table
			case pg_query.ObjectType_OBJECT_DOMCONSTRAINT:
				if len(items) > 0 && items[0].GetTypeName() != nil {
					o, ok = qualifiedName(TypeName, items[0].GetTypeName().Names)
				}
			}
			if !ok {
				o, ok = qualifiedName(class, items)
			}
		}
		if ok {
			ts = append(ts, target{o, nil})
		}
	}
	return ts
}

// classOf maps an object type to how its name resolves.
func classOf(t pg_query.ObjectType) NameClass {
	switch t {
	case pg_query.ObjectType_OBJECT_TABLE, pg_query.ObjectType_OBJECT_VIEW, pg_query.ObjectType_OBJECT_MATVIEW,
		pg_query.ObjectType_OBJECT_SEQUENCE, pg_query.ObjectType_OBJECT_INDEX, pg_query.ObjectType_OBJECT_FOREIGN_TABLE,
		pg_query.ObjectType_OBJECT_COLUMN, pg_query.ObjectType_OBJECT_TABCONSTRAINT, pg_query.ObjectType_OBJECT_TRIGGER,
		pg_query.ObjectType_OBJECT_RULE, pg_query.ObjectType_OBJECT_POLICY:
		return RelationName
	case pg_query.ObjectType_OBJECT_TYPE, pg_query.ObjectType_OBJECT_DOMAIN, pg_query.ObjectType_OBJECT_DOMCONSTRAINT,
		pg_query.ObjectType_OBJECT_ATTRIBUTE:
		return TypeName
	case pg_query.ObjectType_OBJECT_STATISTIC_EXT:
		return StatisticsName
	}
	return OtherName
}

// qualifiedName reads a list of String nodes ([schema,] name; an operator
// class's access method comes first) as a name in a schema.
func qualifiedName(class NameClass, items []*pg_query.Node) (ObjectName, bool) {
	var words []string
	for _, it := range items {
		s, ok := it.GetNode().(*pg_query.Node_String_)
		if !ok {
			return ObjectName{}, false
		}
		words = append(words, s.String_.Sval)
	}
	switch len(words) {
	case 0:
		return ObjectName{}, false
	case 1:
		return ObjectName{Class: class, Name: words[0]}, true
	}
	return ObjectName{Class: class, Schema: words[len(words)-2], Name: words[len(words)-1]}, true
}

// references lists the other objects the statement names: relations and
// types (which the catalog may resolve to temporary ones), and any name
// qualified with pg_temp (a function, an operator, a collation, ...).
func references(n *pg_query.Node, skip map[proto.Message]bool) []ObjectName {
	var refs []ObjectName
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if skip[m] {
			return false
		}
		switch x := m.(type) {
		case *pg_query.RangeVar:
			refs = append(refs, ObjectName{Class: RelationName, Schema: x.Schemaname, Name: x.Relname})
			return false
		case *pg_query.TypeName:
			if o, ok := qualifiedName(TypeName, x.Names); ok && o.Schema != "pg_catalog" {
				refs = append(refs, o)
			}
			return true
		case *pg_query.TypeCast:
			if o, ok := qualifiedName(OtherName, x.GetTypeName().GetNames()); ok && o.Name == "regclass" {
				refs = append(refs, relationTexts(x.Arg)...)
			}
		case *pg_query.FuncCall:
			if o, ok := qualifiedName(OtherName, x.Funcname); ok && sequenceFunctions[o.Name] && len(x.Args) > 0 {
				refs = append(refs, relationTexts(x.Args[0])...)
			}
		}
		refs = append(refs, tempQualifiedLists(m.ProtoReflect())...)
		return true
	})
	return refs
}

// tempQualifiedLists finds, in m's own list fields, names qualified with
// pg_temp: function, operator and collation names are such lists.
func tempQualifiedLists(m protoreflect.Message) []ObjectName {
	var refs []ObjectName
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if !fd.IsList() || fd.Message() == nil {
			return true
		}
		l := v.List()
		items := make([]*pg_query.Node, 0, l.Len())
		for i := 0; i < l.Len(); i++ {
			if node, ok := l.Get(i).Message().Interface().(*pg_query.Node); ok {
				items = append(items, node)
			}
		}
		if o, ok := qualifiedName(OtherName, items); ok && isTempSchema(o.Schema) {
			refs = append(refs, o)
		}
		return true
	})
	return refs
}

// sequenceFunctions take their sequence as regclass, which a string
// constant becomes when the statement is analysed: a column default
// nextval('seq') depends on the sequence it names.
var sequenceFunctions = map[string]bool{"nextval": true, "currval": true, "setval": true}

// relationTexts is the relation a string constant names as regclass input.
func relationTexts(n *pg_query.Node) []ObjectName {
	if c := n.GetAConst(); c != nil {
		if sv, ok := c.Val.(*pg_query.A_Const_Sval); ok {
			return []ObjectName{{Class: RelationText, Name: sv.Sval.GetSval()}}
		}
	}
	return nil
}
