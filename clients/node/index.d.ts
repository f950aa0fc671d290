// Type declarations for sbqueue's Node client (index.js).
import { EventEmitter } from 'node:events';
import { ClientConfig, QueryResult } from 'pg';

export const MESSAGE_FIELDS: Record<string, string>;

export class Message {
    sequenceNumber: bigint;
    messageId: string;
    lockToken: string | null;
    lockedUntil: Date | null;
    deliveryCount: number;
    enqueuedTime: Date;
    scheduledEnqueueTime: Date | null;
    expiresAt: Date | null;
    /** seconds */
    timeToLive: number | null;
    state: 'active' | 'deferred' | 'scheduled';
    sessionId: string | null;
    correlationId: string | null;
    subject: string | null;
    contentType: string | null;
    replyTo: string | null;
    replyToSessionId: string | null;
    toAddress: string | null;
    applicationProperties: Record<string, unknown> | null;
    body: Buffer;
    deadLetterReason: string | null;
    deadLetterErrorDescription: string | null;
    deadLetterSource: string | null;
    bodyText(encoding?: BufferEncoding): string;
    bodyJson(): unknown;
}

export type Token = Message | string;
export type Body = string | Buffer | Uint8Array | unknown;

export interface SendOptions {
    messageId?: string;
    sessionId?: string;
    correlationId?: string;
    subject?: string;
    contentType?: string;
    replyTo?: string;
    replyToSessionId?: string;
    toAddress?: string;
    /** seconds, or an interval literal */
    timeToLive?: number | string;
    scheduledEnqueueTime?: Date | string;
    applicationProperties?: Record<string, unknown>;
}

/** a message with properties of its own, for sendMessages */
export interface OutgoingMessage extends SendOptions {
    body: Body;
}

export type Disposition = 'complete' | 'abandon' | 'defer' | 'deadletter' | 'renew';
export type Outcome = 'completed' | 'abandoned' | 'deferred' | 'dead_lettered' | 'expired' | 'renewed' | 'lock_lost';

export interface Settled {
    lockToken: string;
    outcome: Outcome;
    /** a renewed lock's new expiry */
    lockedUntil: Date | null;
}

export interface ReceiveOptions {
    maxMessages?: number;
    /** seconds */
    maxWait?: number;
    signal?: AbortSignal | null;
}

export class Client {
    constructor(config?: ClientConfig | string, options?: { schema?: string });
    static connect(config?: ClientConfig | string, options?: { schema?: string }): Promise<Client>;
    /** the connection failed: make a new Client */
    broken: boolean;
    close(): Promise<void>;
    query(sql: string, params?: unknown[]): Promise<QueryResult>;
    transaction<T>(fn: (client: Client) => Promise<T>): Promise<T>;
    createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
    deleteQueue(name: string): Promise<void>;
    queueStats(name: string): Promise<Record<string, unknown> | null>;
    sender(queue: string): Sender;
    receiver(queue: string, options?: { receiveMode?: 'peek_lock' | 'receive_and_delete' }): Receiver;
    deadLetterReceiver(queue: string): Receiver;
    acceptSession(queue: string, options?: { sessionId?: string | null; maxWait?: number; signal?: AbortSignal | null }): Promise<SessionReceiver | null>;
}

export class Sender {
    readonly queue: string;
    send(body: Body, options?: SendOptions): Promise<bigint>;
    sendBatch(bodies: Body[], options?: SendOptions): Promise<bigint[]>;
    sendMessages(messages: OutgoingMessage[]): Promise<bigint[]>;
    schedule(body: Body, when: Date, options?: SendOptions): Promise<bigint>;
    cancelScheduled(sequenceNumber: bigint | number | string): Promise<void>;
}

export class Receiver {
    readonly queue: string;
    receive(options?: ReceiveOptions): Promise<Message[]>;
    messages(options?: { maxWait?: number; batchSize?: number; signal?: AbortSignal | null }): AsyncGenerator<Message>;
    peek(options?: { maxMessages?: number; fromSequenceNumber?: bigint | number | null }): Promise<Message[]>;
    receiveDeferred(sequenceNumbers: Array<bigint | number | string>): Promise<Message[]>;
    complete(messages: Token | Token[]): Promise<number>;
    /** delay: seconds before the messages may be received again */
    abandon(messages: Token | Token[], propertiesToModify?: Record<string, unknown> | null, options?: { delay?: number | null }): Promise<void>;
    defer(messages: Token | Token[], propertiesToModify?: Record<string, unknown> | null): Promise<void>;
    deadLetter(messages: Token | Token[], options?: { reason?: string | null; errorDescription?: string | null; propertiesToModify?: Record<string, unknown> | null }): Promise<void>;
    /** for many, the earliest new expiry */
    renew(messages: Token | Token[]): Promise<Date>;
    settle(messages: Token | Token[], disposition: Disposition, options?: { reason?: string | null; errorDescription?: string | null; propertiesToModify?: Record<string, unknown> | null; delay?: number | null }): Promise<Settled[]>;
}

export class SessionReceiver extends Receiver {
    readonly sessionId: string;
    readonly token: string;
    lockedUntil: Date;
    renewSession(): Promise<Date>;
    getState(): Promise<Buffer | null>;
    setState(state: Buffer | Uint8Array | null): Promise<void>;
    release(): Promise<void>;
}

export class DeadLetter extends Error {
    constructor(reason?: string | null, description?: string | null);
    reason: string | null;
    description: string | null;
}

export type HandlerResult = void | undefined | null | true | 'complete' | 'abandon' | 'defer' | 'deadletter';

export class Processor extends EventEmitter {
    constructor(config: ClientConfig | string, queue: string,
                handler: (message: Message) => HandlerResult | Promise<HandlerResult>,
                options?: { concurrency?: number; maxWait?: number; renewLocks?: boolean; schema?: string });
    settled: { complete: number; abandon: number; defer: number; deadletter: number; lost: number; failed: number };
    renewals: number;
    start(): Promise<this>;
    stop(): Promise<void>;
    run(): Promise<void>;
}

export class SbqError extends Error {
    sqlstate: string;
    detail?: string;
    hint?: string;
}
export class QueueNotFound extends SbqError {}
export class MessageLockLost extends SbqError {}
export class MessageNotFound extends SbqError {}
export class SessionLockLost extends SbqError {}
export class SessionCannotBeLocked extends SbqError {}
export class QueueAlreadyExists extends SbqError {}
export class MessageTooLarge extends SbqError {}
export class EntityNotFound extends SbqError {}
export class InvalidOperation extends SbqError {}
export class InvalidArgument extends SbqError {}
export class NullArgument extends SbqError {}
export class PermissionDenied extends SbqError {}
export class OutOfLocks extends SbqError {}
export class ReadOnly extends SbqError {}
export function translate(err: unknown): unknown;
