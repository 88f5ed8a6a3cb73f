"""The SQLAlchemy application of TestAlembicMigrations: the ORM models of
the schema's first revision (0001), used unchanged while alembic migrates
the database past it and back. Connects with libpq's PG* environment
variables (an empty URL: postgresql+psycopg://)."""

import sys

from sqlalchemy import ForeignKey, String, create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

import workload


class Base(DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "author"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    books: Mapped[list["Book"]] = relationship(back_populates="author")


class Book(Base):
    __tablename__ = "book"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(200))
    author_id: Mapped[int] = mapped_column(ForeignKey("author.id"))
    author: Mapped[Author] = relationship(back_populates="books")


def main():
    engine = create_engine("postgresql+psycopg://", pool_pre_ping=True)

    def unit(rng):
        with Session(engine) as s, s.begin():
            author = Author(name="author %d" % rng.randrange(10**9))
            s.add(author)
            s.add(Book(title="first book", author=author))
            # An update of an older row, joined to its author: reads and a
            # write of a row another transaction (the data migration) may write.
            old = s.scalars(select(Book).join(Author).order_by(func.random()).limit(1)).first()
            if old is not None:
                old.title = "title %d" % rng.randrange(10**9)
            s.scalar(select(func.count()).select_from(Book).join(Author))

    return workload.run(unit)


if __name__ == "__main__":
    sys.exit(main())
