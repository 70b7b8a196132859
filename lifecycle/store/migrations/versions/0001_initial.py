"""The initial schema: racklife's tables as they were before migrations existed.

A store made before this revision (these tables, no version table) is stamped
with it rather than migrated. Revision 0001; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_effects',
    sa.Column('token', sa.String(length=200), nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('token')
    )
    with op.batch_alter_table('racklife_effects', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_effects_node'), ['node'], unique=False)

    op.create_table('racklife_nodes',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('serial', sa.String(length=64), nullable=False),
    sa.Column('rack', sa.String(length=63), nullable=False),
    sa.Column('u', sa.Integer(), nullable=False),
    sa.Column('sku', sa.String(length=64), nullable=False),
    sa.Column('pool', sa.String(length=63), nullable=False),
    sa.Column('spec', sa.Text(), nullable=False),
    sa.Column('spec_sha256', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('state_since', sa.DateTime(timezone=True), nullable=False),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('name'),
    sa.UniqueConstraint('serial')
    )
    op.create_table('racklife_pools',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('spec', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('racklife_acceptance_records',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('passed', sa.Boolean(), nullable=False),
    sa.Column('level', sa.String(length=16), nullable=False),
    sa.Column('profile', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('accepted_by', sa.String(length=128), nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=True),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('evidence_dir', sa.Text(), nullable=True),
    sa.Column('evidence_sha256', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('racklife_acceptance_records', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_acceptance_records_node'), ['node'], unique=False)

    op.create_table('racklife_boot_tokens',
    sa.Column('token_sha256', sa.String(length=64), nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('boot_mac', sa.String(length=17), nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('script', sa.Text(), nullable=False),
    sa.Column('issued_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('report', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
    sa.PrimaryKeyConstraint('token_sha256'),
    sa.UniqueConstraint('run_id', 'attempt', name='uq_boot_token_run_attempt')
    )
    with op.batch_alter_table('racklife_boot_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_boot_tokens_boot_mac'), ['boot_mac'], unique=False)
        batch_op.create_index(batch_op.f('ix_racklife_boot_tokens_node'), ['node'], unique=False)

    op.create_table('racklife_transitions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=True),
    sa.Column('target', sa.String(length=32), nullable=False),
    sa.Column('event', sa.String(length=32), nullable=False),
    sa.Column('actor', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=True),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('racklife_transitions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_transitions_node'), ['node'], unique=False)
        batch_op.create_index(batch_op.f('ix_racklife_transitions_run_id'), ['run_id'], unique=False)

    op.create_table('racklife_evidence',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('record_id', sa.String(length=64), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['record_id'], ['racklife_acceptance_records.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('racklife_evidence', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_evidence_record_id'), ['record_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('racklife_evidence', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_evidence_record_id'))

    op.drop_table('racklife_evidence')
    with op.batch_alter_table('racklife_transitions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_transitions_run_id'))
        batch_op.drop_index(batch_op.f('ix_racklife_transitions_node'))

    op.drop_table('racklife_transitions')
    with op.batch_alter_table('racklife_boot_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_boot_tokens_node'))
        batch_op.drop_index(batch_op.f('ix_racklife_boot_tokens_boot_mac'))

    op.drop_table('racklife_boot_tokens')
    with op.batch_alter_table('racklife_acceptance_records', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_acceptance_records_node'))

    op.drop_table('racklife_acceptance_records')
    op.drop_table('racklife_pools')
    op.drop_table('racklife_nodes')
    with op.batch_alter_table('racklife_effects', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_effects_node'))

    op.drop_table('racklife_effects')
